package phase

import (
	"context"
	"errors"

	"github.com/harvester/upgrade-toolkit/api/v1beta1"
)

// WIP: replaced when internal/repo and internal/release land.

type RepoCreate struct{}

func (RepoCreate) Name() string { return v1beta1.StepRepoCreate }
func (RepoCreate) Run(context.Context, *Scope) (Result, error) {
	return Result{}, errors.New("not implemented")
}

type MetadataPopulate struct{}

func (MetadataPopulate) Name() string { return v1beta1.StepMetadataPopulate }
func (MetadataPopulate) Run(context.Context, *Scope) (Result, error) {
	return Result{}, errors.New("not implemented")
}

type ImageCleanup struct{}

func (ImageCleanup) Name() string { return v1beta1.StepImageCleanup }
func (ImageCleanup) Run(context.Context, *Scope) (Result, error) {
	return Result{}, errors.New("not implemented")
}
