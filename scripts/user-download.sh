#!/usr/bin/env bash
# What a program importing the given packages of this checkout downloads:
# `go mod tidy` in a new module, from an empty module cache, then a build.
# Prints the download (module zips and go.mod files) and the unpacked size.
#   bash scripts/user-download.sh github.com/outbox-go/outbox github.com/outbox-go/outbox/store/pgstore
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 IMPORT_PATH..." >&2; exit 2; }
checkout=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
cache=$(mktemp -d)
trap 'chmod -R u+w "$cache"; rm -rf "$work" "$cache"' EXIT
cd "$work"
cat >go.mod <<EOM
module example.com/user

go 1.26.0

require github.com/outbox-go/outbox v0.0.0

replace github.com/outbox-go/outbox => $checkout
EOM
{
  echo 'package main'
  echo 'import ('
  for p in "$@"; do echo "	_ \"$p\""; done
  echo ')'
  echo 'func main() {}'
} >main.go
export GOMODCACHE=$cache GOFLAGS=-mod=mod GOWORK=off
go mod tidy
go build -o /dev/null .
dl=$(du -sm "$cache/cache/download" | cut -f1)
all=$(du -sm "$cache" | cut -f1)
echo "download ${dl} MB, unpacked $((all - dl)) MB, $(wc -l <go.sum) go.sum lines; largest modules (MB):"
(cd "$cache" && find . -maxdepth 4 -type d -name '*@v*' -not -path './cache/*' -exec du -sm {} + | sort -rn | head -5)
