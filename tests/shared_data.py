"""Where the vendored third-party data lives: `third_party/` in the repository (CRDs, traces)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THIRD_PARTY = REPO / "third_party"
CRDS = THIRD_PARTY / "crds"
