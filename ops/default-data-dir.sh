#!/usr/bin/env bash
# Prints the data directory `make run` uses for a checkout at $1 when FINDMY_DATA_DIR is not set:
# $1/data, except as root in a checkout the embedded cluster's OS user cannot pass through (a
# directory above it without the others' x bit, like /root or a mktemp directory). findmy keeps
# its cluster inside the data directory and refuses such a place, so root's `make run` then uses
# /var/lib/findmy/run-<hash of the checkout's path>: one data directory per checkout, everything
# of it in one place, removed with `findmy purge --data-dir DIR --yes`.
set -euo pipefail
checkout=$1
if [[ $(id -u) -ne 0 ]]; then echo "$checkout/data"; exit 0; fi
dir=$checkout
while [[ "$dir" != "/" ]]; do
    mode=$(stat -c %a "$dir")
    if (( (8#$mode & 1) == 0 )); then
        echo "/var/lib/findmy/run-$(printf '%s' "$checkout" | sha256sum | cut -c1-16)"
        exit 0
    fi
    dir=$(dirname "$dir")
done
echo "$checkout/data"
