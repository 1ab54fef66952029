"""`python -m tfjob_worker [flags]`: see `--help` and tfjob_worker.exit_codes."""

from tfjob_worker.runtime import main

if __name__ == "__main__":
    main()
