#!/usr/bin/env bash
# Builds the grpc-go kubelet stand-in into $1 (a binary path), GOPATH mode,
# against Debian's golang-google-grpc-dev.  Generated code and the Go build
# cache live under $2 (scratch), never in git.  Exit 3 when Go or its gRPC
# packages are missing (callers report SKIP).
set -eu
out=$1
scratch=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
command -v go >/dev/null && command -v protoc >/dev/null && command -v protoc-gen-go >/dev/null || exit 3
[ -d /usr/share/gocode/src/google.golang.org/grpc ] || exit 3
gp=$scratch/gopath
mkdir -p "$gp/src/gvkubelet/v1beta1" "$gp/src/gvkubelet/cmd"
cp "$root/proto/deviceplugin/v1beta1/api.proto" "$gp/src/gvkubelet/v1beta1/api.proto"
(cd "$gp/src/gvkubelet/v1beta1" && protoc --go_out=plugins=grpc:. api.proto)
cp "$here/go/main.go" "$gp/src/gvkubelet/cmd/main.go"
export GOPATH="$gp:/usr/share/gocode" GO111MODULE=off GOFLAGS= GOCACHE="${GOCACHE:-$scratch/gocache}"
go build -o "$out" gvkubelet/cmd
