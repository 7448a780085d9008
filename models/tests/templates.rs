//! minijinja renders chat templates exactly like transformers' jinja2 renderer
//! (expected texts from scripts/make_template_goldens.py).

use std::path::PathBuf;

use serde_json::Value;
use verisample_models::{ChatMessage, ChatTemplate, Content, ContentPart, RenderOptions};

fn to_message(v: &Value) -> ChatMessage {
    let role = v["role"].as_str().unwrap().to_string();
    let content = match &v["content"] {
        Value::String(s) => Content::Text(s.clone()),
        Value::Array(parts) => Content::Parts(
            parts
                .iter()
                .map(|p| match p["type"].as_str().unwrap() {
                    "image" => ContentPart::Image,
                    _ => ContentPart::Text {
                        text: p["text"].as_str().unwrap().to_string(),
                    },
                })
                .collect(),
        ),
        other => panic!("unexpected content {other}"),
    };
    ChatMessage { role, content }
}

#[test]
fn renders_like_transformers() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/templates");
    let expected: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    assert!(expected.len() >= 6);
    for (key, case) in &expected {
        let name = key.split('/').next().unwrap();
        let source = std::fs::read_to_string(dir.join(name)).unwrap();
        let template = ChatTemplate::new(source, Default::default()).unwrap();
        let messages: Vec<ChatMessage> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(to_message)
            .collect();
        let opts = RenderOptions {
            add_generation_prompt: case["kwargs"]["add_generation_prompt"]
                .as_bool()
                .unwrap_or(false),
            enable_thinking: case["kwargs"]["enable_thinking"].as_bool(),
        };
        let rendered = template.render(&messages, opts).unwrap();
        assert_eq!(rendered, case["rendered"].as_str().unwrap(), "{key}");
    }
}
