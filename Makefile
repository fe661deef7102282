# upgrade-toolkit: build, test and package the Harvester upgrade toolkit.
# `make help` lists the targets.

# Tool versions, pinned. Every tool is built from source through the Go
# module proxy into bin/, so a fresh machine needs only Go.
CONTROLLER_TOOLS_VERSION ?= v0.19.0
GOLANGCI_LINT_VERSION ?= v2.15.0
SETUP_ENVTEST_VERSION ?= v0.25.1
ENVTEST_K8S_VERSION ?= 1.34.4

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
ENVTEST_DIR ?= $(LOCALBIN)/envtest
ENVTEST_ASSETS ?= $(ENVTEST_DIR)/k8s/$(ENVTEST_K8S_VERSION)-$(shell go env GOOS)-$(shell go env GOARCH)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GIT_COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
GIT_TREE_STATE ?= $(shell if git diff --quiet HEAD -- 2>/dev/null; then echo clean; else echo dirty; fi)
VERSION_PKG := github.com/harvester/upgrade-toolkit/internal/version
LDFLAGS := -s -w -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).GitCommit=$(GIT_COMMIT) -X $(VERSION_PKG).GitTreeState=$(GIT_TREE_STATE)

# Packages the tests run; TEST_ARGS passes extra flags (e.g. -run, -v).
TEST_PKGS ?= ./...
TEST_ARGS ?=

# Packages with benchmarks; BENCH_ARGS passes extra flags (e.g. -bench LargeFile, -count 3).
BENCH_PKGS ?= ./internal/repo
BENCH_ARGS ?=

##@ General

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the DeepCopy code of the API and the foreign kinds.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..." paths="./internal/cluster/apis/..."

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the UpgradePlan CRD, the webhook configuration and the foreign-kind CRD fixtures for tests.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) webhook paths="./internal/webhook/..." output:webhook:artifacts:config=config/webhook
	$(CONTROLLER_GEN) crd paths="./internal/cluster/apis/..." output:crd:artifacts:config=test/crds

.PHONY: verify
verify: generate manifests ## Fail when committed generated files are stale or go.mod is untidy.
	go mod tidy
	@if [ -n "$$(git status --porcelain -- api config test/crds internal/cluster/apis go.mod go.sum)" ]; then \
		echo "Generated files or go.mod are stale; run 'make generate manifests' and 'go mod tidy' and commit:"; \
		git status --porcelain -- api config test/crds internal/cluster/apis go.mod go.sum; \
		git --no-pager diff --stat -- api config test/crds internal/cluster/apis go.mod go.sum; \
		exit 1; \
	fi

.PHONY: fmt
fmt: ## Format the code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: test
test: envtest vet ## Run the unit, integration (envtest) and end-to-end tests.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test $(TEST_PKGS) -count=1 -timeout 30m $(TEST_ARGS)

.PHONY: bench
bench: ## Run the benchmarks (see docs/benchmarks.md; the repo's compare with nginx from hack/install-deps.sh).
	go test $(BENCH_PKGS) -run '^$$' -bench . -benchmem -timeout 30m $(BENCH_ARGS)

.PHONY: envtest
envtest: ## Provide etcd and kube-apiserver for envtest under bin/envtest (download, else build from source).
	@hack/envtest.sh "$(ENVTEST_DIR)" "$(ENVTEST_K8S_VERSION)" "$(SETUP_ENVTEST_VERSION)" >/dev/null

##@ Demo

DEMO_ARGS ?=

.PHONY: demo
demo: envtest build ## Upgrade a simulated 3-node Harvester cluster end to end, live (DEMO_ARGS="--nodes 5 --fault pre-drain ...").
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(LOCALBIN)/upgrade-toolkit demo $(DEMO_ARGS)

##@ Build

.PHONY: build
build: ## Build bin/upgrade-toolkit.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/upgrade-toolkit ./cmd/upgrade-toolkit

.PHONY: run
run: ## Run the controller manager against the cluster of $KUBECONFIG (ENABLE_WEBHOOKS=false to skip the webhook).
	go run ./cmd/upgrade-toolkit manager

##@ Tools

$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN)/.tmp go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/.tmp/controller-gen $@

$(GOLANGCI_LINT):
	GOBIN=$(LOCALBIN)/.tmp go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/.tmp/golangci-lint $@
