#!/usr/bin/env bash
# scripts/release.sh: a release from one command, `make release VERSION=X.Y.Z` (docs/deploy.md,
# "Releasing"). Nothing is fetched beyond the package registries.
#
#   scripts/release.sh [--no-image] [--rehearsal] [--out DIR] VERSION
#       builds into dist/VERSION/ (or DIR):
#         groupwarden-VERSION.tar.gz, groupwarden-VERSION-py3-none-any.whl  sdist and wheel (python -m build)
#         groupwarden-VERSION.tgz                 the Helm chart (version and appVersion VERSION)
#         groupwarden-VERSION-image.tar.gz        the image (docker save | gzip), tagged groupwarden:VERSION,
#                                                 OCI labels version=VERSION, revision=the git commit
#         groupwarden-VERSION-sbom.cdx.json       CycloneDX 1.6 SBOM of the image's Python environment
#         SHA256SUMS                              sha256sum of every file above (sha256sum -c SHA256SUMS)
#       --no-image: everything but the image (the SBOM is still checked against the venv it was made
#       from); --rehearsal: the same build from the tree as it is, even with changes (revision label
#       COMMIT-dirty) or a VERSION already released at another commit: a rehearsal, never a release.
#   scripts/release.sh bump X.Y.Z      writes X.Y.Z into operator/groupwarden/__init__.py (the one
#                                      source of the version) and the chart's Chart.yaml
#   scripts/release.sh commit VERSION  the commit of a recorded release (deploy/releases.txt)
#   scripts/release.sh previous        the last recorded release: VERSION COMMIT DATE
#
# A release never bumps the version; it refuses (exit 2): a VERSION that is not X.Y.Z or not the
# package's __version__, a Chart.yaml that says another version, a CHANGELOG.md without a
# "## [VERSION]" section, a VERSION that deploy/releases.txt records at another commit, a tree with
# changes (git status --porcelain, untracked files included).
#
# The image: with the devstack's dockerd (DOCKER_HOST unset or the one of .devstack/node.env)
# devstack/node.sh build, which builds offline (the local Python base, the host-resolved
# .wheelhouse/); with any other DOCKER_HOST a plain `docker build` (its builder needs the base image's
# registry and PyPI). The SBOM: cyclonedx-py (PyPI's cyclonedx-bom) over a throwaway venv made as the
# Dockerfile makes /opt/groupwarden (the release's wheel, --only-binary, the image's constraints, the
# same wheel files when the build was offline, pip and setuptools removed), then compared with what
# the image's own interpreter lists in /opt/groupwarden: the release fails when they differ.
# Env: PYTHON [.venv/bin/python], HELM [helm: PATH, else the devstack's], IMAGE_NAME [groupwarden].
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
INIT="$REPO/operator/groupwarden/__init__.py"
CHART="$REPO/deploy/helm/groupwarden"
RELEASES="$REPO/deploy/releases.txt"
CONSTRAINTS="$REPO/deploy/docker/constraints.txt"
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
IMAGE_NAME=${IMAGE_NAME:-groupwarden}

log() { printf 'release: %s\n' "$*" >&2; }
refuse() { printf 'release: %s\n' "$*" >&2; exit 2; }
die() { printf 'release: %s\n' "$*" >&2; exit 1; }

package_version() { sed -n 's/^__version__ *= *"\(.*\)"$/\1/p' "$INIT" | head -1; }
chart_field() { sed -n "s/^$1: *\"\{0,1\}\([^\"]*\)\"\{0,1\} *$/\1/p" "$CHART/Chart.yaml" | head -1; }
valid_version() { [[ $1 =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$ ]]; }
# "VERSION COMMIT DATE" lines; '#' starts a comment.
recorded_commit() { awk -v v="$1" '$1 !~ /^#/ && $1 == v {print $2; exit}' "$RELEASES"; }

cmd_bump() {
  local new=${1:-}
  valid_version "$new" || refuse "usage: scripts/release.sh bump X.Y.Z (got '${new}')"
  sed -i "s/^__version__ *= *\".*\"$/__version__ = \"$new\"/" "$INIT"
  sed -i -e "s/^version: .*/version: $new/" -e "s/^appVersion: .*/appVersion: \"$new\"/" "$CHART/Chart.yaml"
  [[ $(package_version) == "$new" && $(chart_field version) == "$new" && $(chart_field appVersion) == "$new" ]] \
    || die "could not write $new into $INIT and $CHART/Chart.yaml"
  log "version $new in operator/groupwarden/__init__.py and deploy/helm/groupwarden/Chart.yaml"
  grep -q "^## \[$new\]" "$REPO/CHANGELOG.md" \
    || log "now move CHANGELOG.md's [Unreleased] entries under '## [$new] - $(date -u +%F)' (a release needs it)"
}

cmd_commit() {
  local commit
  commit=$(recorded_commit "${1:?usage: scripts/release.sh commit VERSION}")
  [[ -n $commit ]] || die "no release $1 in deploy/releases.txt"
  echo "$commit"
}

cmd_previous() {
  awk '$1 !~ /^#/ && NF >= 2 {last = $0} END {if (last == "") exit 1; print last}' "$RELEASES" \
    || die "no release recorded in deploy/releases.txt"
}

helm_bin() {
  if [[ -n ${HELM:-} ]]; then echo "$HELM"
  elif command -v helm >/dev/null 2>&1; then command -v helm
  elif [[ -x $REPO/.devstack/bin/helm ]]; then echo "$REPO/.devstack/bin/helm"
  else die "no helm: put it on PATH, set HELM, or start the devstack (make devstack)"
  fi
}

# The devstack's DOCKER_HOST, when this checkout runs one.
devstack_docker_host() {
  local env=${DEVSTACK_DIR:-$REPO/.devstack}/node.env
  [[ -f $env ]] && sed -n 's/^export DOCKER_HOST="\(.*\)"$/\1/p' "$env" | head -1
  return 0
}

cmd_release() {
  local version="" out="" with_image=1 rehearsal=0
  while (($#)); do
    case $1 in
      --no-image) with_image=0 ;;
      --rehearsal) rehearsal=1 ;;
      --out) out=${2:?--out DIR}; shift ;;
      -*) refuse "unknown option $1 (scripts/release.sh --help)" ;;
      *) [[ -z $version ]] || refuse "one VERSION only"; version=$1 ;;
    esac
    shift
  done
  valid_version "$version" || refuse "usage: make release VERSION=X.Y.Z (got '${version}')"

  # ---- refusals: what is released is exactly one committed version
  local source_version commit recorded dirty revision
  source_version=$(package_version)
  [[ $version == "$source_version" ]] \
    || refuse "VERSION $version is not the package's version $source_version (operator/groupwarden/__init__.py): bump it first (scripts/release.sh bump $version), commit, then release"
  [[ $(chart_field version) == "$version" && $(chart_field appVersion) == "$version" ]] \
    || refuse "deploy/helm/groupwarden/Chart.yaml says version $(chart_field version), appVersion $(chart_field appVersion): scripts/release.sh bump $version"
  grep -q "^## \[$version\]" "$REPO/CHANGELOG.md" \
    || refuse "CHANGELOG.md has no '## [$version] - DATE' section"
  commit=$(git -C "$REPO" rev-parse HEAD)
  recorded=$(recorded_commit "$version")
  if [[ -n $recorded && $(git -C "$REPO" rev-parse "$recorded^{commit}" 2>/dev/null || echo "$recorded") != "$commit" ]]; then
    ((rehearsal)) || refuse "$version is the release of commit $recorded (deploy/releases.txt), not of HEAD $commit: bump the version (scripts/release.sh bump X.Y.Z)"
    log "REHEARSAL: $version was released at $recorded; these artifacts are of HEAD $commit"
  fi
  dirty=$(git -C "$REPO" status --porcelain)
  revision=$commit
  if [[ -n $dirty ]]; then
    ((rehearsal)) || refuse "the tree has changes (git status --porcelain: $(wc -l <<<"$dirty") entries): commit them (or --rehearsal)"
    revision="$commit-dirty"
    log "REHEARSAL: the tree has changes; the artifacts are not a release (revision $revision)"
  fi

  out=${out:-$REPO/dist/$version}
  mkdir -p "$out"
  out=$(cd "$out" && pwd -P)
  local work t0=$SECONDS
  work=$(mktemp -d "${TMPDIR:-/tmp}/groupwarden-release.XXXXXX")
  # shellcheck disable=SC2064 # expand now: the path is fixed
  trap "rm -rf '$work'" EXIT
  rm -f "$out"/groupwarden-"$version"* "$out/SHA256SUMS"
  log "groupwarden $version (commit $revision) into $out"

  # ---- sdist and wheel, from the files the image's build context gets (.dockerignore)
  mkdir -p "$work/src"
  tar -C "$REPO" --exclude=__pycache__ --exclude='*.egg-info' --exclude='*.pyc' -cf - pyproject.toml README.md operator \
    | tar -C "$work/src" -xf -
  "$PYTHON" -m build --outdir "$out" "$work/src" >"$work/build.log" 2>&1 \
    || { tail -30 "$work/build.log" >&2; die "python -m build failed"; }
  local sdist="$out/groupwarden-$version.tar.gz" wheel="$out/groupwarden-$version-py3-none-any.whl"
  [[ -f $sdist && -f $wheel ]] || die "python -m build made $(ls "$out"), not groupwarden-$version.tar.gz and its wheel"
  log "sdist and wheel ($((SECONDS - t0)) s)"

  # ---- the chart, version and appVersion from the package
  local helm
  helm=$(helm_bin)
  "$helm" lint --strict "$CHART" >"$work/helm-lint.log" 2>&1 || { cat "$work/helm-lint.log" >&2; die "helm lint --strict failed"; }
  "$helm" package "$CHART" --version "$version" --app-version "$version" --destination "$out" >/dev/null
  [[ -f $out/groupwarden-$version.tgz ]] || die "helm package made no groupwarden-$version.tgz"
  log "chart ($((SECONDS - t0)) s)"

  # ---- the image
  local tag="$IMAGE_NAME:$version" offline=0 devstack_host
  if ((with_image)); then
    devstack_host=$(devstack_docker_host)
    if [[ -n $devstack_host && ( -z ${DOCKER_HOST:-} || ${DOCKER_HOST:-} == "$devstack_host" ) ]]; then
      offline=1
      export DOCKER_HOST=$devstack_host
      IMAGE_REVISION=$revision "$REPO/devstack/node.sh" build "$tag" >/dev/null
    else
      command -v docker >/dev/null 2>&1 || die "no docker: start the devstack (make devstack) or set DOCKER_HOST"
      docker build --build-arg "VERSION=$version" --build-arg "REVISION=$revision" -t "$tag" "$REPO" >"$work/docker-build.log" 2>&1 \
        || { tail -30 "$work/docker-build.log" >&2; die "docker build failed"; }
    fi
    local labels
    labels=$(docker image inspect -f '{{index .Config.Labels "org.opencontainers.image.version"}} {{index .Config.Labels "org.opencontainers.image.revision"}}' "$tag")
    [[ $labels == "$version $revision" ]] || die "image $tag has labels version/revision '$labels', not '$version $revision'"
    docker save "$tag" | gzip -6 >"$out/groupwarden-$version-image.tar.gz"
    log "image $tag ($(docker image inspect -f '{{.Id}}' "$tag")) saved ($((SECONDS - t0)) s)"
  fi

  # ---- the SBOM of the image's Python environment
  local venv="$work/opt-groupwarden" sbom="$out/groupwarden-$version-sbom.cdx.json"
  "$PYTHON" -m venv "$venv"
  local pip_install=("$venv/bin/pip" install -q --disable-pip-version-check --no-compile --only-binary=:all: --constraint "$CONSTRAINTS" "$wheel")
  if ((offline)); then
    # The wheel files the image was built from (devstack/node.sh's wheelhouse), nothing else.
    PIP_NO_INDEX=1 PIP_FIND_LINKS="$REPO/.wheelhouse" "${pip_install[@]}" >"$work/sbom-venv.log" 2>&1 \
      || { tail -30 "$work/sbom-venv.log" >&2; die "installing the wheel into the SBOM's venv from .wheelhouse/ failed"; }
  elif [[ -d $REPO/.wheelhouse ]] && PIP_NO_INDEX=1 PIP_FIND_LINKS="$REPO/.wheelhouse" "${pip_install[@]}" >"$work/sbom-venv.log" 2>&1; then
    log "the SBOM's venv from .wheelhouse/ (the same pins)"
  else
    "${pip_install[@]}" >"$work/sbom-venv.log" 2>&1 \
      || { tail -30 "$work/sbom-venv.log" >&2; die "installing the wheel into the SBOM's venv failed"; }
  fi
  "$venv/bin/pip" uninstall -q --yes pip setuptools >>"$work/sbom-venv.log" 2>&1
  # The root component (groupwarden itself) from pyproject.toml, with the version it reads from the
  # package (cyclonedx-py does not evaluate setuptools' dynamic version).
  sed "s/^dynamic = \[\"version\"\]$/version = \"$version\"/" "$work/src/pyproject.toml" >"$work/root-pyproject.toml"
  grep -q "^version = \"$version\"$" "$work/root-pyproject.toml" || die "pyproject.toml has no 'dynamic = [\"version\"]' line"
  SOURCE_DATE_EPOCH=$(git -C "$REPO" log -1 --format=%ct HEAD) \
    "$(dirname "$PYTHON")/cyclonedx-py" environment --output-reproducible --output-format JSON --spec-version 1.6 \
    --mc-type application --pyproject "$work/root-pyproject.toml" --output-file "$sbom" "$venv/bin/python" \
    >"$work/sbom.log" 2>&1 || { cat "$work/sbom.log" >&2; die "cyclonedx-py failed"; }
  "$PYTHON" "$REPO/scripts/sbom_components.py" --print-probe >"$work/probe.py"
  "$venv/bin/python" "$work/probe.py" >"$work/venv-packages.txt"
  "$PYTHON" "$REPO/scripts/sbom_components.py" "$sbom" --expect "$work/venv-packages.txt" >&2 \
    || die "the SBOM does not list the venv it was made from"
  if ((with_image)); then
    docker run --rm -i --network none --entrypoint python "$tag" - <"$work/probe.py" >"$work/image-packages.txt" \
      || die "listing the image's Python packages failed"
    "$PYTHON" "$REPO/scripts/sbom_components.py" "$sbom" --expect "$work/image-packages.txt" >&2 \
      || die "the SBOM does not list the image's /opt/groupwarden"
  fi
  log "SBOM ($((SECONDS - t0)) s)"

  # ---- checksums of every artifact
  (cd "$out" && find . -maxdepth 1 -type f -name "groupwarden-$version*" -printf '%f\n' | LC_ALL=C sort \
    | xargs sha256sum >SHA256SUMS && sha256sum --quiet -c SHA256SUMS)
  log "done in $((SECONDS - t0)) s:"
  (cd "$out" && find . -maxdepth 1 -type f -printf '%f\n' | LC_ALL=C sort | xargs ls -l) | awk '{printf "  %12d  %s\n", $5, $9}' >&2
  if ((!rehearsal && with_image)) && [[ -z $recorded ]]; then
    log "record it: append '$version $commit $(git -C "$REPO" log -1 --format=%cs HEAD)' to deploy/releases.txt (commit that), and git tag -a v$version $commit -m 'groupwarden $version'"
  fi
}

case "${1:-}" in
  bump) shift; cmd_bump "$@" ;;
  commit) shift; cmd_commit "$@" ;;
  previous) cmd_previous ;;
  -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0" ;;
  *) cmd_release "$@" ;;
esac
