# syntax=docker/dockerfile:1
#
# The toolkit's image: one static binary, /usr/local/bin/upgrade-toolkit,
# whose subcommands are the manager (the default), the upgrade repo's server
# and the Jobs' commands. The Jobs that work on a node use the node's own
# tools (containerd's ctr, crictl, elemental, systemd) through the node's root
# file system mounted at /host, so the image carries no tool, no shell and no
# package manager: less to patch, less to attack. `make docker-build` builds
# it; `make docker-buildx` builds it for several platforms and pushes it.
#
# Not yet so: internal/host runs the node's tools through a `chroot` binary
# and bind-mounts with `mount`, both looked up in the image, and copies the
# image's /usr/local/bin/elemental (with its glibc) to the node;
# internal/clusterupgrade runs `wharfie` from the image. This image has none
# of them, so the node jobs' host steps and the Rancher upgrade fail in it
# until they run the node's tools inside /host themselves (Go's
# SysProcAttr.Chroot and syscall.Mount; elemental from the release) or those
# tools are added here.

ARG GO_VERSION=1.26

# Build on the builder's platform and cross-compile: the binary is pure Go.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev
ARG GIT_COMMIT=unknown
ARG GIT_TREE_STATE=unknown
# `make build` stamps the version in, as for local builds, with CGO off.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH make build LOCALBIN=/out \
      VERSION="$VERSION" GIT_COMMIT="$GIT_COMMIT" GIT_TREE_STATE="$GIT_TREE_STATE"

# CA certificates, time zones and a passwd file; nothing else.
FROM gcr.io/distroless/static-debian12
COPY --from=build /out/upgrade-toolkit /usr/local/bin/upgrade-toolkit
# Not root: the manager and the repo server need no privilege. The node Jobs
# ask for root (and the host) in their own pod spec.
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/upgrade-toolkit"]
CMD ["manager"]
