"""`groupwarden migrate-storage`: rewrite every stored ConsumerGroupPolicy at the storage version
(v1beta1) and trim the CRD's `status.storedVersions`; the last step of an upgrade from 0.1.0
(docs/deploy.md, "Upgrading"). Run it as a cluster admin, after the new CRD is applied."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from groupwarden.commands import exit_codes
from groupwarden.core.crd import API_VERSION, CRD_NAME


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate-storage",
        help=f"rewrite every stored policy as {API_VERSION} and trim the CRD's storedVersions",
    )
    parser.add_argument("--kubeconfig", metavar="PATH", help="default: $KUBECONFIG, ~/.kube/config")
    parser.add_argument("--dry-run", action="store_true", help="list what would be rewritten, write nothing")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: the Kubernetes client takes ~0.15 s and 13 MB to import, and
    # every other verb (a warm `plan` is ~1 s in all) would pay for it.
    from kubernetes.client.exceptions import ApiException

    from groupwarden.adapters.kubernetes_client import load_api_client
    from groupwarden.adapters.kubernetes_storage_migration import migrate_policies

    try:
        result = migrate_policies(load_api_client(args.kubeconfig), dry_run=args.dry_run)
    except ApiException as error:
        return exit_codes.fail(
            f"{CRD_NAME}: HTTP {error.status} {error.reason} (this needs list/update on "
            "consumergrouppolicies in every namespace and update on customresourcedefinitions/status)",
            exit_codes.PARTIAL_FAILURE,
        )
    verb = "would rewrite" if args.dry_run else "rewrote"
    print(f"{verb} {len(result.rewritten)} policies as {API_VERSION}", end="")
    print(f"; {len(result.gone)} deleted meanwhile" if result.gone else "")
    for label, why in sorted(result.failed.items()):
        print(f"error: {label}: not rewritten: {why}", file=sys.stderr)
    before, after = ", ".join(result.stored_versions_before), ", ".join(result.stored_versions_after)
    if args.dry_run:
        print(f"storedVersions: {before} (unchanged: --dry-run)")
        return exit_codes.OK
    if result.failed:
        print(f"storedVersions: {before} (unchanged: {len(result.failed)} policies not rewritten)")
        return exit_codes.PARTIAL_FAILURE
    print(f"storedVersions: {before} -> {after}" if before != after else f"storedVersions: {after}")
    return exit_codes.OK
