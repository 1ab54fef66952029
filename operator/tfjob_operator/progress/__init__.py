"""Training progress, as the operator and `tfjob local` read it from the chief:

- `chief_log`: the worker runtime's `[tfjob] ...` log lines, parsed (and the history plotted) for `tfjob local`;
- `chief_metrics`: the chief's `/metrics` read into `status.progress` (pure);
- `poller`: the operator's periodic pass that reads every running chief and writes what moved.
"""
