#!/usr/bin/env bash
# build-image.sh TAG DOCKER-BUILD-ARGS... builds one image with `docker build`
# and never pulls (every Dockerfile here starts FROM outboxlab/debian:bookworm,
# which exists locally). The build log is printed only when the build fails;
# a failed build leaves no intermediate container behind (--force-rm).
set -euo pipefail
tag=$1
shift
log=$(mktemp "${TMPDIR:-/tmp}/outboxlab-build.XXXXXX")
trap 'rm -f "$log"' EXIT
start=$(date +%s)
if ! docker build --pull=false --force-rm -t "$tag" "$@" >"$log" 2>&1; then
	grep -v -e 'legacy builder is deprecated' -e 'Install the buildx component' -e 'docs.docker.com/go/buildx' "$log" | tail -n 60 >&2
	echo "image: building $tag failed" >&2
	exit 1
fi
echo "image: $tag built in $(($(date +%s) - start))s"
