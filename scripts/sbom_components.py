"""The packages a CycloneDX SBOM lists, compared with the distributions of a Python environment.

scripts/release.sh runs it twice: against the throwaway venv the SBOM was made from, and against the
image's own /opt/groupwarden (its `python` lists what importlib.metadata finds there; the image has
no pip). Usage:

    python scripts/sbom_components.py SBOM.json [--expect FILE]
    python scripts/sbom_components.py --print-probe

prints the SBOM's `name==version` lines (the root component included) and, with --expect (one
`name==version` a line, as PROBE prints them), exits 1 listing every difference. --print-probe
prints PROBE, the program that lists an environment's distributions.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

# What release.sh runs with an environment's interpreter: its distributions as `name==version`.
PROBE = (
    "from importlib import metadata\n"
    "for d in metadata.distributions():\n"
    "    print(f\"{d.metadata['Name']}=={d.version}\")\n"
)


def normalize(name: str) -> str:
    """PEP 503 names: `Typing_Extensions` and `typing-extensions` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pin(line: str) -> str:
    name, _, version = line.strip().partition("==")
    return f"{normalize(name)}=={version}"


def sbom_pins(sbom: dict[str, object]) -> list[str]:
    found: set[str] = set()
    metadata = sbom.get("metadata")
    entries: list[object] = []
    if isinstance(metadata, dict) and isinstance(metadata.get("component"), dict):
        entries.append(metadata["component"])
    components = sbom.get("components")
    if isinstance(components, list):
        entries.extend(components)
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("type") not in ("library", "application"):
            continue
        found.add(f"{normalize(str(entry['name']))}=={entry.get('version', '')}")
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("sbom", type=Path, nargs="?")
    parser.add_argument("--expect", type=Path, help="name==version lines the SBOM must list exactly")
    parser.add_argument("--print-probe", action="store_true", help="print the distributions probe")
    args = parser.parse_args(argv)
    if args.print_probe:
        print(PROBE, end="")
        return 0
    if args.sbom is None:
        parser.error("an SBOM file is needed")
    listed = sbom_pins(json.loads(args.sbom.read_text()))
    if args.expect is None:
        print("\n".join(listed))
        return 0
    expected = sorted({pin(line) for line in args.expect.read_text().splitlines() if line.strip()})
    missing = sorted(set(expected) - set(listed))
    extra = sorted(set(listed) - set(expected))
    for line in missing:
        print(f"{args.sbom.name}: missing {line} (installed in {args.expect.name})", file=sys.stderr)
    for line in extra:
        print(f"{args.sbom.name}: lists {line}, not installed in {args.expect.name}", file=sys.stderr)
    if missing or extra:
        return 1
    print(f"{args.sbom.name}: the {len(listed)} packages of {args.expect.name}, with their versions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
