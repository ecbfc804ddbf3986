#!/usr/bin/env bash
# Best effort: Debian's nsight-systems 2022.4 (component non-free) runs without a GPU. It lets the
# tests exercise the .qdrep/.nsys-rep input path and the 2022.4 export schema, and the benchmarks run
# `nsys analyze` side by side. `apt-get install` refuses it (it depends on libcuda1), so the two .debs
# are downloaded and unpacked under /opt/nvidia/nsight-systems/2022.4.2, where the loader looks.
set -euo pipefail
dest=${NSYS_DEST:-/opt/nvidia/nsight-systems/2022.4.2}
[ -x "$dest/bin/nsys" ] && exit 0
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ] && ! grep -q "non-free" "$src"; then
    sed -i 's/^Components: main.*/& non-free/' "$src"
fi
apt-get update -qq
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download -qq nsight-systems nsight-systems-target >/dev/null)
mkdir -p "$tmp/root"
for deb in "$tmp"/*.deb; do dpkg -x "$deb" "$tmp/root"; done
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
cp -a "$tmp/root/usr/lib/nsight-systems" "$dest"
# target-linux-x64 is a link into the multiarch folder: replace it with the real files
if [ -L "$dest/target-linux-x64" ]; then
    rm "$dest/target-linux-x64"
    cp -a "$tmp/root/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64" "$dest/target-linux-x64"
fi
rm -rf "$tmp"
"$dest/bin/nsys" --version
