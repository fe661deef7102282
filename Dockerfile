# syntax=docker/dockerfile:1
#
# The toolkit's image: one static binary, /usr/local/bin/upgrade-toolkit,
# whose subcommands are the manager (the default), the upgrade repo's server
# and the Jobs' commands, plus the few tools the Jobs run inside their own
# container:
#   - chroot and mount (util-linux, coreutils): the node jobs run the node's
#     own tools (containerd's ctr, crictl, systemctl, grub2-editenv) through
#     the node's root file system mounted at /host, and bind-mount the
#     image's /lib64 over the node's while elemental runs;
#   - elemental, from the Harvester OS image of the same release: it writes
#     the new OS and knows the release's image format better than an older
#     host's copy (internal/host.Chroot copies it to the node);
#   - wharfie and helm: the cluster-upgrade Job extracts Rancher's chart from
#     the release's image archives and upgrades the Rancher release.
# The manager and the repo server use none of them and run as uid 1000 with
# a read-only root; the node and cluster Jobs ask for root in their pod spec.
# `make docker-build` builds it; `make docker-buildx` builds it for several
# platforms and pushes it.

ARG GO_VERSION=1.26
# The release whose elemental the node jobs use, and the tools' versions.
ARG HARVESTER_OS_IMAGE=rancher/harvester-os:v1.8.0
ARG WHARFIE_IMAGE=rancher/wharfie:v0.7.0
ARG HELM_VERSION=v3.21.4

FROM ${HARVESTER_OS_IMAGE} AS os
FROM ${WHARFIE_IMAGE} AS wharfie

# Build on the builder's platform and cross-compile: the binaries are pure Go.
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
ARG HELM_VERSION
# `make build` stamps the version in, as for local builds, with CGO off.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH make build LOCALBIN=/out \
      VERSION="$VERSION" GIT_COMMIT="$GIT_COMMIT" GIT_TREE_STATE="$GIT_TREE_STATE"
# helm from source; a cross-compiled `go install` lands in bin/<os>_<arch>.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    GOOS=$TARGETOS GOARCH=$TARGETARCH CGO_ENABLED=0 \
      go install -trimpath -ldflags "-s -w" helm.sh/helm/v3/cmd/helm@${HELM_VERSION} && \
    cp "$(go env GOPATH)/bin/${TARGETOS}_${TARGETARCH}/helm" /out/helm 2>/dev/null || cp "$(go env GOPATH)/bin/helm" /out/helm

# SUSE's minimal base, as Harvester's own images: glibc for elemental,
# util-linux and coreutils for mount and chroot, CA certificates.
FROM registry.suse.com/bci/bci-base:16.0
RUN zypper --non-interactive install --no-recommends util-linux && zypper clean --all
COPY --from=build /out/upgrade-toolkit /usr/local/bin/upgrade-toolkit
COPY --from=build /out/helm /usr/local/bin/helm
COPY --from=os /usr/bin/elemental /usr/local/bin/elemental
COPY --from=wharfie /usr/bin/wharfie /usr/local/bin/wharfie
# Not root: the manager and the repo server need no privilege.
USER 1000:1000
ENTRYPOINT ["/usr/local/bin/upgrade-toolkit"]
CMD ["manager"]
