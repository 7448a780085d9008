// verisample view: the rows of an output folder, a page at a time.
//
// Every dataset string reaches the page through textContent (or an attribute set with
// setAttribute / dataset): nothing is parsed as HTML. The filters and the page live in the
// address's query string (split, family, reason, verdict, accepted_by, q, page, per), so a
// link reproduces a view; changing them pushes a new address.
'use strict';

(function () {
  const FILTERS = ['split', 'family', 'reason', 'verdict', 'accepted_by', 'q'];
  const DEFAULT_PER = 25;
  const form = document.getElementById('filters');
  const rowsBox = document.getElementById('rows');
  const statusLine = document.getElementById('status');
  let state = fromAddress();
  let loading = 0;

  function fromAddress() {
    const p = new URLSearchParams(window.location.search);
    const s = {};
    for (const k of FILTERS) s[k] = p.get(k) || '';
    s.page = Math.max(1, parseInt(p.get('page') || '1', 10) || 1);
    s.per = Math.max(1, parseInt(p.get('per') || String(DEFAULT_PER), 10) || DEFAULT_PER);
    return s;
  }

  function params(s, forApi) {
    const p = new URLSearchParams();
    for (const k of FILTERS) if (s[k]) p.set(k, s[k]);
    if (s.page > 1 || forApi) p.set('page', String(s.page));
    if (s.per !== DEFAULT_PER || forApi) p.set('per', String(s.per));
    return p;
  }

  function el(tag, className, text) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function option(select, value, label) {
    const o = el('option', null, label === undefined ? value : label);
    o.value = value;
    select.appendChild(o);
  }

  function go(next, push) {
    state = next;
    const qs = params(state, false).toString();
    const address = window.location.pathname + (qs ? '?' + qs : '');
    if (push) window.history.pushState(null, '', address);
    else window.history.replaceState(null, '', address);
    load();
  }

  function fillForm() {
    for (const k of FILTERS) {
      const input = form.elements[k];
      if (input.tagName === 'SELECT' && state[k] && !Array.from(input.options).some(o => o.value === state[k])) {
        option(input, state[k]);
      }
      input.value = state[k];
    }
    const per = form.elements.per;
    if (!Array.from(per.options).some(o => o.value === String(state.per))) option(per, String(state.per));
    per.value = String(state.per);
  }

  function readForm() {
    const s = { page: 1, per: parseInt(form.elements.per.value, 10) || DEFAULT_PER };
    for (const k of FILTERS) s[k] = form.elements[k].value.trim();
    return s;
  }

  // A filter value as a button that sets that filter.
  function chip(field, value, className) {
    const b = el('button', 'chip ' + (className || ''), value);
    b.type = 'button';
    b.title = 'show only ' + field + ' = ' + value;
    b.addEventListener('click', () => {
      const s = Object.assign({}, state, { page: 1 });
      s[field] = value;
      go(s, true);
    });
    return b;
  }

  // A labelled value; `pre` for text whose lines matter ('prose': in the body font).
  function field(dl, label, value, pre) {
    if (value === null || value === undefined) return;
    dl.appendChild(el('dt', null, label));
    const dd = el('dd');
    if (value instanceof Node) dd.appendChild(value);
    else if (value === '') dd.appendChild(el('span', 'empty', '(empty)'));
    else if (pre) dd.appendChild(el('pre', pre === 'prose' ? 'text prose' : 'text', value));
    else dd.textContent = value;
    dl.appendChild(dd);
  }

  const KNOWN = ['question', 'answer', 'org_answer', 'vlm_answer', 'think', 'wrong_vlm',
    'reason', 'accepted_by', 'judge_verdict', 'judge_raw'];

  function entry(kind, qa) {
    const box = el('section', 'entry');
    const dl = el('dl');
    field(dl, 'question', qa.question, 'prose');
    if (kind === 'rejected') {
      field(dl, 'reference', qa.answer);
      field(dl, 'model said', qa.wrong_vlm, true);
      if (qa.reason) field(dl, 'reason', chip('reason', qa.reason, 'reason'));
    } else {
      field(dl, 'reference', qa.org_answer);
      field(dl, 'answer', qa.answer, true);
      if (qa.vlm_answer !== qa.answer) field(dl, 'whole answer', qa.vlm_answer, true);
      if (qa.accepted_by) field(dl, 'accepted by', chip('accepted_by', qa.accepted_by, 'accepted'));
    }
    if (qa.think !== undefined) field(dl, 'reasoning', qa.think, true);
    if (qa.judge_verdict) field(dl, 'judge verdict', chip('verdict', qa.judge_verdict, 'verdict'));
    field(dl, 'judge said', qa.judge_raw, true);
    for (const k of Object.keys(qa)) {
      if (!KNOWN.includes(k)) field(dl, k, qa[k], true);
    }
    box.appendChild(dl);
    return box;
  }

  function details(label, text, className) {
    const d = el('details', className);
    d.appendChild(el('summary', null, label));
    d.appendChild(el('pre', 'text', text));
    return d;
  }

  function pretty(text) {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (e) {
      return text;
    }
  }

  function rowElement(r) {
    const article = el('article', 'row ' + r.kind);
    article.dataset.split = r.split;
    article.dataset.row = String(r.row);
    const figure = el('figure', 'image');
    const img = el('img');
    img.alt = 'image of ' + r.split + ' row ' + r.row;
    img.addEventListener('load', () => {
      if (img.naturalWidth > 0) img.dataset.loaded = '1';
    });
    img.addEventListener('error', () => {
      img.dataset.loaded = 'error';
    });
    img.src = '/image/' + encodeURIComponent(r.split) + '/' + r.row;
    figure.appendChild(img);
    const caption = el('figcaption');
    caption.appendChild(el('span', 'split ' + r.kind, r.split));
    caption.appendChild(el('span', 'index', '#' + r.row));
    if (r.image_path) caption.appendChild(el('span', 'path', r.image_path));
    figure.appendChild(caption);
    article.appendChild(figure);
    const body = el('div', 'entries');
    for (const qa of r.qa) body.appendChild(entry(r.kind, qa));
    if (r.extra.length) {
      const dl = el('dl', 'extra');
      for (const [k, v] of r.extra) field(dl, k, typeof v === 'string' ? v : JSON.stringify(v), true);
      body.appendChild(dl);
    }
    const foot = el('div', 'foot');
    if (r.clean_meta !== null) foot.appendChild(details('clean_meta', pretty(r.clean_meta), 'meta'));
    if (r.image_sha256) foot.appendChild(el('span', 'sha', 'image_sha256 ' + r.image_sha256));
    body.appendChild(foot);
    article.appendChild(body);
    return article;
  }

  function setPager(data) {
    for (const b of document.querySelectorAll('.pager .prev')) b.disabled = state.page <= 1;
    for (const b of document.querySelectorAll('.pager .next')) b.disabled = !data || !data.more;
  }

  function describe(data) {
    const first = (data.page - 1) * data.per;
    const shown = data.rows.length;
    if (!shown) {
      return data.total === 0 ? 'no rows match' : 'no rows on page ' + data.page;
    }
    const range = 'rows ' + (first + 1) + '–' + (first + shown);
    if (data.total !== null) return range + ' of ' + data.total;
    return range + ' of more (the scan stopped once this page was full)';
  }

  async function load() {
    fillForm();
    const ticket = ++loading;
    statusLine.textContent = 'loading…';
    setPager(null);
    let data;
    try {
      const response = await fetch('/api/rows?' + params(state, true).toString());
      data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
    } catch (e) {
      if (ticket !== loading) return;
      statusLine.textContent = 'error: ' + e.message;
      rowsBox.replaceChildren();
      return;
    }
    if (ticket !== loading) return;
    rowsBox.replaceChildren(...data.rows.map(rowElement));
    statusLine.textContent = describe(data);
    document.body.dataset.total = data.total === null ? 'more' : String(data.total);
    setPager(data);
    window.scrollTo(0, 0);
  }

  async function loadMeta() {
    try {
      const meta = await (await fetch('/api/meta')).json();
      document.getElementById('out').textContent = meta.title;
      document.title = 'verisample view: ' + meta.title;
      for (const s of meta.splits) {
        option(form.elements.split, s.name, s.name + ' (' + s.rows + ')');
      }
      for (const f of meta.families) option(form.elements.family, f);
      for (const k of ['reason', 'verdict', 'accepted_by']) {
        const list = document.getElementById(k + '-values');
        for (const v of meta.choices[k]) option(list, v);
      }
      fillForm();
    } catch (e) {
      statusLine.textContent = 'error: ' + e.message;
    }
  }

  form.addEventListener('submit', ev => {
    ev.preventDefault();
    go(readForm(), true);
  });
  for (const name of ['split', 'family', 'per']) {
    form.elements[name].addEventListener('change', () => go(readForm(), true));
  }
  document.getElementById('clear').addEventListener('click', () => {
    go({ split: '', family: '', reason: '', verdict: '', accepted_by: '', q: '', page: 1, per: state.per }, true);
  });
  for (const b of document.querySelectorAll('.pager .prev')) {
    b.addEventListener('click', () => go(Object.assign({}, state, { page: Math.max(1, state.page - 1) }), true));
  }
  for (const b of document.querySelectorAll('.pager .next')) {
    b.addEventListener('click', () => go(Object.assign({}, state, { page: state.page + 1 }), true));
  }
  window.addEventListener('popstate', () => {
    state = fromAddress();
    load();
  });

  loadMeta();
  load();
})();
