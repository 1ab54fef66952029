"""Where the project's shared data lives: `shared/` beside the repository (third-party CRDs, traces)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CRDS = SHARED_DATA / "crds"
