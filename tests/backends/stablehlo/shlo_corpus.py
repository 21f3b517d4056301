"""Where the corpus lives and which of its programs are present (a plain module, not a conftest,
so its name cannot clash with other test folders)."""

import json
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[3] / "pjrt_hub" / "data" / "corpus"


def public_programs():
    manifest = json.loads((CORPUS / "public" / "manifest.json").read_text())
    return [p for p in manifest["programs"] if (CORPUS / "public" / p["file"]).exists()]


def perf_programs():
    manifest = json.loads((CORPUS / "perf" / "manifest.json").read_text())
    return [p for p in manifest["programs"] if (CORPUS / "perf" / p["file"]).exists()]

