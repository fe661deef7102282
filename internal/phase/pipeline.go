package phase

// Pipeline returns the phases of an upgrade, index for index with
// pipeline.Steps.
func Pipeline() []Phase {
	return []Phase{
		Initialize{}, ISODownload{}, RepoCreate{}, MetadataPopulate{},
		ImagePreload{}, ClusterUpgrade{}, NodeUpgrade{}, ImageCleanup{},
	}
}
