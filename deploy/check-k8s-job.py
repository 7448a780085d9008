#!/usr/bin/env python3
"""Check deploy/k8s-indexed-job.yaml against the real Kubernetes batch/v1 Job schema and against
deploy/slurm-array.sbatch.

1. Schema: the OpenAPI-derived JSON schema of batch/v1 Job for Kubernetes 1.33 (bundled by the
   `kubernetes-validate` package, no cluster or network needed), in strict mode, so a misspelt
   field is an error as `kubectl apply --validate=strict` makes it. A negative control (the same
   file with `completionMode` misspelt) must be refused, or the check itself is broken.
2. Indexed-Job semantics the schema cannot express: `completionMode: Indexed`, `--shard
   $JOB_COMPLETION_INDEX/N` with N = `spec.completions`.
3. Environment: the Job sets every VERISAMPLE_* variable the sbatch script reads, and no other,
   and its args use each of them.
"""
import copy
import re
import sys
from pathlib import Path

import kubernetes_validate
import yaml

KUBERNETES_VERSION = "1.33.0"

root = Path(__file__).resolve().parent
job = yaml.safe_load((root / "k8s-indexed-job.yaml").read_text())
sbatch = (root / "slurm-array.sbatch").read_text()
errors = []


def schema_errors(doc):
    """The strict-schema error of `doc` as one line, or None when it validates."""
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return str(e).splitlines()[0]
    return None


problem = schema_errors(job)
if problem:
    errors.append(f"not a valid batch/v1 Job (Kubernetes {KUBERNETES_VERSION}): {problem}")
misspelt = copy.deepcopy(job)
misspelt["spec"]["completionsMode"] = misspelt["spec"].pop("completionMode", "Indexed")
if schema_errors(misspelt) is None:
    errors.append("schema check is broken: a misspelt spec.completionsMode was accepted")

spec = job.get("spec", {})
if spec.get("completionMode") != "Indexed":
    errors.append("spec.completionMode must be Indexed")
containers = spec.get("template", {}).get("spec", {}).get("containers") or [{}]
container = containers[0]
args = " ".join(container.get("args") or [])
if f"$JOB_COMPLETION_INDEX/{spec.get('completions')}" not in args:
    errors.append("--shard INDEX/N must use N = spec.completions")
env = container.get("env") or []
in_job = {e["name"] for e in env if e.get("name", "").startswith("VERISAMPLE_")}
in_sbatch = set(re.findall(r"\$\{(VERISAMPLE_[A-Z_]+)", sbatch)) - {"VERISAMPLE_BIN"}
if in_job != in_sbatch:
    errors.append(f"environment differs: job {sorted(in_job)}, sbatch {sorted(in_sbatch)}")
if not all(f"${v}" in args for v in in_job):
    errors.append("the job's args must use every VERISAMPLE_* variable")
if errors:
    sys.exit("deploy/k8s-indexed-job.yaml: " + "; ".join(errors))
print(f"k8s Indexed Job ok: valid batch/v1 Job (Kubernetes {KUBERNETES_VERSION}, strict), "
      f"{spec['completions']} indexes, environment {sorted(in_job)}")
