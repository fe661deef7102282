# upgrade-toolkit: build, test and package the Harvester upgrade toolkit.
# `make help` lists the targets.

# Tool versions, pinned. Every tool is built from source through the Go
# module proxy into bin/, so a fresh machine needs only Go.
CONTROLLER_TOOLS_VERSION ?= v0.19.0
GOLANGCI_LINT_VERSION ?= v2.15.0
SETUP_ENVTEST_VERSION ?= v0.25.1
ENVTEST_K8S_VERSION ?= 1.34.4
KUSTOMIZE_VERSION ?= v5.8.2
HELM_VERSION ?= v3.21.4
KWOK_VERSION ?= v0.8.0

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec
.DEFAULT_GOAL := help

LOCALBIN ?= $(CURDIR)/bin
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)
# kubectl is needed only to deploy to a cluster; take the one on the PATH.
KUBECTL ?= kubectl
CONTAINER_TOOL ?= docker
ENVTEST_DIR ?= $(LOCALBIN)/envtest
ENVTEST_ASSETS ?= $(ENVTEST_DIR)/k8s/$(ENVTEST_K8S_VERSION)-$(shell go env GOOS)-$(shell go env GOARCH)
# kube-controller-manager and kube-scheduler of the same release, for the test
# world (internal/testenv).
K8S_COMPONENTS_DIR ?= $(LOCALBIN)/k8s
KUBE_CONTROLLERS_ASSETS ?= $(K8S_COMPONENTS_DIR)/k8s/$(ENVTEST_K8S_VERSION)-$(shell go env GOOS)-$(shell go env GOARCH)
KWOK ?= $(LOCALBIN)/kwok-$(KWOK_VERSION)
# The real CRDs of the foreign kinds (hack/crdgen).
UPSTREAM_CRDS ?= $(LOCALBIN)/upstream-crds
# What the tests, the demo and the benchmarks find the world's parts by.
WORLD_ENV = KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" KUBE_CONTROLLERS_ASSETS="$(KUBE_CONTROLLERS_ASSETS)" KWOK="$(KWOK)" UPSTREAM_CRDS="$(UPSTREAM_CRDS)"

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
GIT_COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
GIT_TREE_STATE ?= $(shell if git diff --quiet HEAD -- 2>/dev/null; then echo clean; else echo dirty; fi)
VERSION_PKG := github.com/harvester/upgrade-toolkit/internal/version
LDFLAGS := -s -w -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).GitCommit=$(GIT_COMMIT) -X $(VERSION_PKG).GitTreeState=$(GIT_TREE_STATE)

# The image: REPO is the registry and organisation (e.g. REPO=starbops for
# your own Docker Hub), the tag is <branch>-head unless IMG says otherwise.
REPO ?= rancher
IMAGE_TAG ?= $(subst /,-,$(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo dev))-head
IMG ?= $(REPO)/harvester-upgrade-toolkit:$(IMAGE_TAG)
# The platforms docker-buildx builds for.
PLATFORMS ?= linux/amd64,linux/arm64

CHART_DIR := charts/upgrade-toolkit
# The toolkit is installed into the namespace it works in.
NAMESPACE := harvester-system

# Which +kubebuilder:rbac markers make which role (config/rbac/<role>_role.yaml):
# those of the manager's packages, of the webhook's, of the metrics endpoint's,
# of the upgrade log's capture (bound only when it runs);
# every other package's markers are the Jobs' (node jobs, restore-vm), so that
# a new job package needs no change here. The cluster-upgrade Job runs as
# cluster-admin (it upgrades Rancher with Helm): its markers only document
# what its own code asks of the API.
MODULE := github.com/harvester/upgrade-toolkit
MANAGER_PKGS := ./internal/manager ./internal/controller ./internal/phase ./internal/preflight
WEBHOOK_PKGS := ./internal/webhook
METRICS_AUTH_PKGS := ./internal/metrics
UPGRADE_LOG_PKGS := ./internal/upgradelog
CLUSTER_UPGRADE_PKGS := ./internal/clusterupgrade
JOB_PKGS = $(filter-out $(MANAGER_PKGS) $(WEBHOOK_PKGS) $(METRICS_AUTH_PKGS) $(UPGRADE_LOG_PKGS) $(CLUSTER_UPGRADE_PKGS),$(shell go list ./... | sed 's|^$(MODULE)|.|'))

# Packages the tests run; TEST_ARGS passes extra flags (e.g. -run, -v).
TEST_PKGS ?= ./...
TEST_ARGS ?=

# Packages with benchmarks; BENCH_ARGS passes extra flags (e.g. -bench LargeFile, -count 3).
# The whole-upgrade benchmarks (test/bench) run each size once; UPGRADE_BENCH_ARGS
# narrows them (e.g. -bench 'Upgrade/nodes=3$$'); BENCH_NODES replaces the sizes
# (default 3,10,50,200,500; e.g. BENCH_NODES=1000). BenchmarkCapture (the log
# capture on and off, kubelets answering and refusing) runs at
# BENCH_CAPTURE_NODES (default 10,200); UPGRADE_BENCH_ARGS='-bench Capture'
# runs it alone.
BENCH_PKGS ?= ./internal/repo ./internal/planstatus ./internal/vmledger
BENCH_ARGS ?=
UPGRADE_BENCH_ARGS ?=
BENCH_NODES ?=
BENCH_CAPTURE_NODES ?=

##@ General

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the DeepCopy code of the API and the foreign kinds.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..." paths="./internal/cluster/apis/..."

# gen-role ROLE,PACKAGES writes config/rbac/ROLE_role.yaml, the roles named
# upgrade-toolkit-ROLE (ROLE with dashes) from the markers of PACKAGES: a
# ClusterRole and a Role per namespace a marker names; an empty ClusterRole
# when there is no marker, so that every role exists.
define gen-role
rm -f config/rbac/$(1)_role.yaml
$(CONTROLLER_GEN) rbac:roleName=upgrade-toolkit-$(subst _,-,$(1)),fileName=$(1)_role.yaml $(foreach p,$(2),paths=$(p)) output:rbac:artifacts:config=config/rbac
test -f config/rbac/$(1)_role.yaml || printf -- '---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: upgrade-toolkit-$(subst _,-,$(1))\nrules: []\n' > config/rbac/$(1)_role.yaml

endef

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD, the webhook configuration and the roles under config/ and their copies in the Helm chart.
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) webhook paths="./internal/webhook/..." output:webhook:artifacts:config=config/webhook
	$(call gen-role,manager,$(MANAGER_PKGS))
	$(call gen-role,webhook,$(WEBHOOK_PKGS))
	$(call gen-role,metrics_auth,$(METRICS_AUTH_PKGS))
	$(call gen-role,upgrade_log,$(UPGRADE_LOG_PKGS))
	$(call gen-role,job,$(JOB_PKGS))
	rm -rf $(CHART_DIR)/crds $(CHART_DIR)/files && mkdir -p $(CHART_DIR)/crds $(CHART_DIR)/files/rbac $(CHART_DIR)/files/webhook
	cp config/crd/bases/*.yaml $(CHART_DIR)/crds/
	cp config/rbac/manager_role.yaml config/rbac/webhook_role.yaml config/rbac/metrics_auth_role.yaml config/rbac/upgrade_log_role.yaml config/rbac/job_role.yaml \
		config/rbac/metrics_reader_role.yaml $(CHART_DIR)/files/rbac/
	cp config/webhook/manifests.yaml $(CHART_DIR)/files/webhook/

.PHONY: verify
verify: generate manifests ## Fail when committed generated files are stale or go.mod is untidy.
	go mod tidy
	cd hack/crdgen && GOWORK=off go mod tidy
	cd test/alerts && GOWORK=off go mod tidy
	@if [ -n "$$(git status --porcelain -- api config $(CHART_DIR) internal/cluster/apis go.mod go.sum hack/crdgen/go.mod hack/crdgen/go.sum test/alerts/go.mod test/alerts/go.sum)" ]; then \
		echo "Generated files or go.mod are stale; run 'make generate manifests' and 'go mod tidy' and commit:"; \
		git status --porcelain -- api config $(CHART_DIR) internal/cluster/apis go.mod go.sum hack/crdgen/go.mod hack/crdgen/go.sum test/alerts/go.mod test/alerts/go.sum; \
		git --no-pager diff --stat -- api config $(CHART_DIR) internal/cluster/apis go.mod go.sum hack/crdgen/go.mod hack/crdgen/go.sum test/alerts/go.mod test/alerts/go.sum; \
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
test: deps tools vet ## Run the unit, integration (envtest), packaging and end-to-end tests.
	$(WORLD_ENV) KUSTOMIZE="$(KUSTOMIZE)" HELM="$(HELM)" go test $(TEST_PKGS) -count=1 -timeout 70m $(TEST_ARGS)
	$(MAKE) --no-print-directory test-alerts
	$(MAKE) --no-print-directory fuzz

# The parsers of what users and foreign components hand the toolkit, fuzzed
# for FUZZ_EXECS inputs each (their seeds also run in every `go test`). A count,
# not a duration: with a duration Go's fuzz coordinator can fail a target with a
# bare "context deadline exceeded" when a starved worker misses the stop
# (golang/go#75804; CI met it on FuzzNew with no failing input). An input that
# hangs still fails, at the -timeout.
FUZZ_EXECS ?= 20000x
FUZZ_TARGETS = ./internal/release:FuzzParseRelease ./internal/release:FuzzParseBundleMetadata \
	./internal/release:FuzzParseImageList ./internal/release:FuzzParseVersion ./internal/release:FuzzCheckEligibility \
	./internal/repo/iso9660:FuzzNew ./internal/preflight:FuzzAdmitAnnotations

.PHONY: fuzz
fuzz: ## Fuzz the parsers of release metadata, image lists, ISO images and plan annotations, FUZZ_EXECS inputs each.
	@set -e; for t in $(FUZZ_TARGETS); do \
		echo "fuzz $${t#*:} ($${t%%:*}) for $(FUZZ_EXECS)"; \
		go test $${t%%:*} -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZ_EXECS) -fuzzminimizetime 200x -timeout 5m; \
	done

.PHONY: test-alerts
test-alerts: ## Evaluate the chart's alert rules with Prometheus's rule parser and PromQL engine (test/alerts, a module of its own).
	cd test/alerts && GOWORK=off go test -count=1 ./...

# What the tests need, built from source and cached under bin/. The kwok, CRD,
# helm and kustomize builds run beside the Kubernetes build (which builds
# its four components in one go) to overlap their downloads and links.
.PHONY: tools
tools: ## Build everything the tests run (the world's parts, helm, kustomize) into bin/.
	@$(MAKE) --no-print-directory -j 3 world kustomize helm

.PHONY: world
world: kubernetes kwok upstream-crds ## Build the test world: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and the upstream CRDs.

.PHONY: kubernetes
kubernetes: envtest k8s-components

.PHONY: bench
bench: deps world ## Benchmarks: the repo server against nginx, and whole upgrades of 3 to 500 simulated nodes (docs/benchmarks.md).
	go test $(BENCH_PKGS) -run '^$$' -bench . -benchmem -timeout 30m $(BENCH_ARGS)
	$(WORLD_ENV) BENCH_NODES=$(BENCH_NODES) BENCH_CAPTURE_NODES=$(BENCH_CAPTURE_NODES) go test ./test/bench -run '^$$' -bench . -benchtime 1x -timeout 6h $(UPGRADE_BENCH_ARGS)

# Chaos runs (docs/reliability.md): seeded faults in whole simulated upgrades.
# `make test` runs 10 seeds at 3 nodes; `make chaos` runs CHAOS_SEEDS_3 seeds
# at 3 nodes and CHAOS_SEEDS_10 at 10, each set after a fault-free run to time
# against; CHAOS_SEED=N CHAOS_NODES=M make chaos replays one seed.
CHAOS_SEEDS_3 ?= 100
CHAOS_SEEDS_10 ?= 20
CHAOS_RUN = $(WORLD_ENV) go test ./test/chaos -run TestChaos -count=1 -timeout 12h -v

.PHONY: chaos
chaos: deps world ## Whole simulated upgrades under seeded faults: manager kills, API errors, an API outage, leader handovers.
ifdef CHAOS_SEED
	CHAOS_KEEP_LOGS=1 $(CHAOS_RUN)
else
	CHAOS_BASELINE=1 CHAOS_NODES=3 CHAOS_SEEDS=$(CHAOS_SEEDS_3) $(CHAOS_RUN)
	CHAOS_BASELINE=1 CHAOS_NODES=10 CHAOS_SEEDS=$(CHAOS_SEEDS_10) $(CHAOS_RUN)
endif

.PHONY: deps
deps: ## Install the Debian packages the tests use (xorriso, nginx) when they are missing.
	@hack/install-deps.sh

.PHONY: envtest
envtest: ## Provide etcd and kube-apiserver for envtest under bin/envtest (download, else build from source).
	@hack/envtest.sh "$(ENVTEST_DIR)" "$(ENVTEST_K8S_VERSION)" "$(SETUP_ENVTEST_VERSION)" >/dev/null

# After envtest: built from source, they share its module graph and most of
# its compiled packages.
.PHONY: k8s-components
k8s-components: envtest ## Build kube-controller-manager and kube-scheduler under bin/k8s from source.
	@hack/build-envtest-bins.sh --components kube-controller-manager,kube-scheduler "$(K8S_COMPONENTS_DIR)" "$(ENVTEST_K8S_VERSION)" >/dev/null

.PHONY: upstream-crds
upstream-crds: ## Write the real CRDs of the foreign kinds under bin/upstream-crds (hack/crdgen).
	@hack/upstream-crds.sh "$(UPSTREAM_CRDS)" >/dev/null

.PHONY: kwok
kwok: $(KWOK) ## Build kwok into bin/.

##@ Demo

DEMO_ARGS ?=

.PHONY: demo
demo: world build-sim ## Upgrade a simulated 3-node Harvester cluster end to end, live (DEMO_ARGS="--nodes 5 --fault pre-drain ...").
	$(WORLD_ENV) $(LOCALBIN)/upgrade-toolkit-sim demo $(DEMO_ARGS)

PLUGIN_DIR ?= $(HOME)/.local/bin

.PHONY: kubectl-plugin
kubectl-plugin: build ## Link bin/upgrade-toolkit as $(PLUGIN_DIR)/kubectl-upgrade_status: kubectl upgrade-status.
	mkdir -p $(PLUGIN_DIR) && ln -sf $(abspath $(LOCALBIN))/upgrade-toolkit $(PLUGIN_DIR)/kubectl-upgrade_status

##@ Build

.PHONY: build
build: ## Build bin/upgrade-toolkit, the product: what the image ships.
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/upgrade-toolkit ./cmd/upgrade-toolkit

.PHONY: build-sim
build-sim: ## Build bin/upgrade-toolkit-sim, the rehearsal: the demo on a simulated cluster (never shipped).
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o $(LOCALBIN)/upgrade-toolkit-sim ./cmd/upgrade-toolkit-sim

.PHONY: run
run: ## Run the controller manager against the cluster of $KUBECONFIG (ENABLE_WEBHOOKS=false to skip the webhook).
	go run ./cmd/upgrade-toolkit manager

.PHONY: docker-build
docker-build: container-tool ## Build the image IMG (REPO=..., IMAGE_TAG=... or IMG=... to name it).
	$(CONTAINER_TOOL) build $(IMAGE_BUILD_ARGS) -t $(IMG) .

.PHONY: docker-push
docker-push: container-tool ## Push the image IMG.
	$(CONTAINER_TOOL) push $(IMG)

.PHONY: docker-buildx
docker-buildx: container-tool ## Build the image IMG for PLATFORMS and push it.
	$(CONTAINER_TOOL) buildx build --push --platform=$(PLATFORMS) $(IMAGE_BUILD_ARGS) -t $(IMG) .

IMAGE_BUILD_ARGS = --build-arg VERSION=$(VERSION) --build-arg GIT_COMMIT=$(GIT_COMMIT) --build-arg GIT_TREE_STATE=$(GIT_TREE_STATE)

.PHONY: container-tool
container-tool:
	@command -v $(CONTAINER_TOOL) >/dev/null 2>&1 || { \
		echo "$(CONTAINER_TOOL) is not installed: building the image needs a container engine (install Docker, or set CONTAINER_TOOL=podman)." >&2; exit 1; }
	@$(CONTAINER_TOOL) info >/dev/null 2>&1 || { \
		echo "$(CONTAINER_TOOL) cannot reach its engine: start the Docker daemon (or check DOCKER_HOST), then retry." >&2; exit 1; }

.PHONY: build-installer
build-installer: manifests kustomize ## Write dist/install.yaml: everything `make deploy` installs, with the image IMG.
	mkdir -p dist
	hack/kustomize-build.sh "$(KUSTOMIZE)" "$(IMG)" > dist/install.yaml

##@ Deployment

.PHONY: install
install: kustomize kubectl ## Install the UpgradePlan CRD into the cluster of $KUBECONFIG.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) apply --server-side -f -

.PHONY: uninstall
uninstall: kustomize kubectl ## Remove the UpgradePlan CRD, and with it every UpgradePlan, from the cluster of $KUBECONFIG.
	$(KUSTOMIZE) build config/crd | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: deploy
deploy: kustomize kubectl ## Install the toolkit (config/default, image IMG) into the cluster of $KUBECONFIG.
	hack/kustomize-build.sh "$(KUSTOMIZE)" "$(IMG)" | $(KUBECTL) apply --server-side -f -

.PHONY: undeploy
undeploy: kustomize kubectl ## Remove what `make deploy` installed, the CRD and every UpgradePlan included.
	hack/kustomize-build.sh "$(KUSTOMIZE)" "$(IMG)" | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: helm-deploy
helm-deploy: helm ## Install or upgrade the local Helm chart, image IMG, into the cluster of $KUBECONFIG.
	img='$(IMG)'; repo=$${img%:*} tag=$${img##*:}; \
	if [[ $${img##*/} != *:* ]]; then repo=$$img tag=latest; fi; \
	$(HELM) upgrade --install upgrade-toolkit $(CHART_DIR) --namespace $(NAMESPACE) \
		--set image.repository=$$repo --set image.tag=$$tag $(HELM_ARGS)

.PHONY: kubectl
kubectl:
	@command -v $(KUBECTL) >/dev/null 2>&1 || { echo "$(KUBECTL) is not installed: deploying needs kubectl (https://kubernetes.io/docs/tasks/tools/)." >&2; exit 1; }

##@ Tools

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Build kustomize into bin/.

.PHONY: helm
helm: $(HELM) ## Build helm into bin/.

$(KUSTOMIZE):
	GOBIN=$(LOCALBIN)/.tmp go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(LOCALBIN)/.tmp/kustomize $@

# As helm's own build does: its version, and the Kubernetes version of its
# client-go as the default for `helm template` and `helm lint`.
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	$(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=36)

$(HELM):
	GOBIN=$(LOCALBIN)/.tmp go install -ldflags "$(HELM_LDFLAGS)" helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
	mv $(LOCALBIN)/.tmp/helm $@

$(KWOK):
	GOBIN=$(LOCALBIN)/.tmp-kwok CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok@$(KWOK_VERSION)
	mv $(LOCALBIN)/.tmp-kwok/kwok $@

$(CONTROLLER_GEN):
	GOBIN=$(LOCALBIN)/.tmp go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/.tmp/controller-gen $@

$(GOLANGCI_LINT):
	GOBIN=$(LOCALBIN)/.tmp go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv $(LOCALBIN)/.tmp/golangci-lint $@
