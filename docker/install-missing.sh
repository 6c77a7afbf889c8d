#!/usr/bin/env bash
# install-missing.sh installs the Debian packages of the tools a build needs
# and this machine lacks, when it can: as root with apt-get (the package
# lists may be stale, so they are updated first; recommended packages are
# installed too, as debootstrap needs its keyring and gnupg). Otherwise it
# prints the one command that installs them and fails.
#
# Usage: docker/install-missing.sh WHO TOOL[:PACKAGE]...
#   WHO prefixes every line ("base", "ci"); PACKAGE defaults to TOOL.
# Exit status: 0 when every tool is there (now), 1 when one is missing.
set -euo pipefail

who=$1
shift
missing=()
for spec in "$@"; do
	tool=${spec%%:*}
	command -v "$tool" >/dev/null 2>&1 || missing+=("${spec#*:}")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
	echo "$who: ${missing[*]} missing, and there is no apt-get here: install ${missing[*]} with this machine's package manager, then run make again" >&2
	exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "$who: ${missing[*]} missing: run   sudo apt-get install -y ${missing[*]}   then run make again" >&2
	exit 1
fi
echo "$who: installing ${missing[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp "${TMPDIR:-/tmp}/outboxlab-apt.XXXXXX")
trap 'rm -f "$log"' EXIT
if ! { apt-get update -q && apt-get install -y -q "${missing[@]}"; } >"$log" 2>&1; then
	tail -n 30 "$log" >&2
	echo "$who: installing ${missing[*]} failed" >&2
	exit 1
fi
for spec in "$@"; do
	command -v "${spec%%:*}" >/dev/null 2>&1 || { echo "$who: ${spec%%:*} is still missing after installing ${spec#*:}" >&2; exit 1; }
done
