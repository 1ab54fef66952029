"""The `tfjob` command and what it drives from outside a cluster: `cli`, `jobs` (submit, status, logs,
wait), `tensorboard`, and `local/` (`tfjob local`, its live view and faults; needs the extra `[local]`)."""
