#!/usr/bin/env python3
"""Check deploy/k8s-indexed-job.yaml: the fields and types the batch/v1 Job schema requires of
an Indexed Job (no cluster here to validate against, so the rules are spelled out), and that
it sets every VERISAMPLE_* variable that deploy/slurm-array.sbatch reads, and no other."""
import re
import sys
from pathlib import Path

import yaml

root = Path(__file__).resolve().parent
job = yaml.safe_load((root / "k8s-indexed-job.yaml").read_text())
sbatch = (root / "slurm-array.sbatch").read_text()
errors = []


def need(cond, what):
    if not cond:
        errors.append(what)


need(job.get("apiVersion") == "batch/v1", "apiVersion must be batch/v1")
need(job.get("kind") == "Job", "kind must be Job")
need(isinstance(job.get("metadata", {}).get("name"), str), "metadata.name must be a string")
spec = job.get("spec", {})
need(spec.get("completionMode") == "Indexed", "spec.completionMode must be Indexed")
for key in ("completions", "parallelism", "backoffLimitPerIndex"):
    need(isinstance(spec.get(key), int) and spec[key] >= 0, f"spec.{key} must be an int >= 0")
pod = spec.get("template", {}).get("spec", {})
need(pod.get("restartPolicy") in ("Never", "OnFailure"), "restartPolicy must be Never or OnFailure")
containers = pod.get("containers") or []
need(len(containers) == 1, "one container")
c = containers[0] if containers else {}
for key in ("name", "image"):
    need(isinstance(c.get(key), str), f"container.{key} must be a string")
env = c.get("env") or []
need(all(isinstance(e.get("name"), str) and isinstance(e.get("value"), str) for e in env),
     "env entries are {name: str, value: str}")
mounts = {m.get("name") for m in c.get("volumeMounts") or []}
volumes = {v.get("name") for v in pod.get("volumes") or []}
need(mounts <= volumes, f"volumeMounts {sorted(mounts - volumes)} have no volume")
args = " ".join(c.get("args") or [])
need(f"/{spec.get('completions')}" in args, "--shard INDEX/N must use N = spec.completions")
in_job = {e["name"] for e in env if e.get("name", "").startswith("VERISAMPLE_")}
in_sbatch = set(re.findall(r"\$\{(VERISAMPLE_[A-Z_]+)", sbatch)) - {"VERISAMPLE_BIN"}
need(in_job == in_sbatch, f"environment differs: job {sorted(in_job)}, sbatch {sorted(in_sbatch)}")
need(all(f"${v}" in args for v in in_job), "the job's args use every VERISAMPLE_* variable")
if errors:
    sys.exit("deploy/k8s-indexed-job.yaml: " + "; ".join(errors))
print(f"k8s Indexed Job ok: {spec['completions']} indexes, environment {sorted(in_job)}")
