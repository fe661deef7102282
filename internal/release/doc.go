// Package release reads the content of a Harvester release ISO as the
// upgrade repo serves it, and holds the version rules of an upgrade. The
// manager (MetadataPopulate, the eligibility check, ImageCleanup), the job
// commands and the simulator share it, so that they agree on every file and
// rule.
//
// Files, by their path in the repo (under RepoRoot, /harvester-iso/):
//
//	harvester-release.yaml                                     ParseRelease, Client.Release
//	rootfs.squashfs                                            RootfsFile, Client.Open
//	bundle/metadata.yaml                                       ParseBundleMetadata, Client.BundleMetadata
//	bundle/<list>, bundle/<archive>.tar.zst                    ImageArchive.ListPath/ArchivePath, Client.Get/Open
//	bundle/harvester/images-lists-archive/<v>/image_list_all.txt  ParseImageList, Client.ImageList
//
// Parsers are strict: every problem of a file is reported at once in a
// *ContentError (errors.Is(err, ErrMalformed)) whose message names the file,
// the field or line, what was found and what was expected. Keys the parser
// does not know are ignored, because the release build may add keys.
//
// Versions: ParseVersion and CheckEligibility implement the rules of
// harvester/go-common's version package (see CheckEligibility).
//
// The releasetest subpackage builds a realistic repo in memory for tests.
package release
