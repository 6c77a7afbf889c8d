#!/usr/bin/env bash
# build.sh makes the base image that every other outboxlab image starts FROM,
# without pulling anything from a container registry.
#
# When an image debian:bookworm-slim already exists locally it is tagged as
# the base. Otherwise a minimal Debian bookworm root file system is made with
# debootstrap from the Debian package mirror and turned into an image with
# `docker import`; run as root, it installs debootstrap first when it is
# missing and apt-get is there (docker/install-missing.sh).
#
# Usage: docker/debian/build.sh [TAG]      (default outboxlab/debian:bookworm)
# Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR override the mirrors.
set -euo pipefail

tag=${1:-outboxlab/debian:bookworm}
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# The image records a hash of this script; an image built by the same script
# is kept as it is (a fresh clone on a machine that already has it builds
# nothing, and the images built FROM it stay cached).
inputs=$(sha256sum "$0" | cut -c1-16)
if [ "$(docker image inspect --format '{{index .Config.Labels "org.outboxlab.inputs"}}' "$tag" 2>/dev/null)" = "$inputs" ]; then
	echo "base: $tag is up to date"
	exit 0
fi

if docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
	echo "base: tagging local debian:bookworm-slim as $tag"
	docker tag debian:bookworm-slim "$tag"
	exit 0
fi

# debootstrap needs root. As root, a missing debootstrap is installed with
# apt-get; as anyone else, the one command that does both is printed.
if [ "$(id -u)" -ne 0 ]; then
	echo "base: building $tag needs root (debootstrap): run   sudo $0 $tag   (it installs debootstrap with apt-get when it is missing), then run make again" >&2
	exit 1
fi
"$(dirname "$0")/../install-missing.sh" base debootstrap

root=$(mktemp -d "${TMPDIR:-/var/tmp}/outboxlab-rootfs.XXXXXX")
cleanup() {
	# debootstrap mounts /proc and /sys inside the target while it works; a
	# failed run can leave them mounted, and rm must never descend into them.
	local m
	for m in $(awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount -l "$m" || true
	done
	rm -rf --one-file-system "$root" || true
}
trap cleanup EXIT

echo "base: debootstrap --variant=minbase $suite from $mirror"
start=$(date +%s)
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 || {
	tail -n 30 "$root.log" >&2
	rm -f "$root.log"
	exit 1
}
rm -f "$root.log"

# Services must never start while packages are installed in an image build.
cat >"$root/usr/sbin/policy-rc.d" <<'POLICY'
#!/bin/sh
exit 101
POLICY
chmod 0755 "$root/usr/sbin/policy-rc.d"

cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
SOURCES

cat >"$root/etc/apt/apt.conf.d/90outboxlab" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
Acquire::Retries "3";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
APT

mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
# An image build that fails is thrown away whole, so dpkg need not fsync
# every file it unpacks (the same setting as Docker's official images).
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/90outboxlab-unsafe-io"

# Documentation and translations are of no use in these images and slow
# every package installation down.
cat >"$root/etc/dpkg/dpkg.cfg.d/90outboxlab-nodoc" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
DPKG
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true

echo localhost >"$root/etc/hostname"
: >"$root/etc/resolv.conf"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* "$root"/tmp/* "$root"/var/log/*.log

echo "base: importing $root as $tag"
tar --numeric-owner --xattrs -C "$root" -c . | docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' \
	--change 'CMD ["/bin/bash"]' \
	--change 'LABEL org.outboxlab.image=debian' \
	--change "LABEL org.outboxlab.inputs=$inputs" \
	--message "debootstrap --variant=minbase $suite" \
	- "$tag" >/dev/null
echo "base: $tag built in $(($(date +%s) - start))s"
