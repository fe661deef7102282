// Package iso9660 reads the files inside an ISO 9660 image (ECMA-119) with
// its Rock Ridge or Joliet names directly from the image file: no mount, no
// loop device, no privileges. File data is read by random access from the
// image, so memory does not depend on file sizes.
//
// It exists because the Go ISO 9660 readers on the module proxy do not
// handle files of 4 GiB and more, which xorriso writes as several extents
// (they would serve the first 4 GiB and stop), and either swallow read
// errors of a truncated image or pull in a large dependency tree. This
// reader covers what release ISOs use: Rock Ridge names, modes, times,
// symbolic links and relocated deep directories; Joliet names when there is
// no Rock Ridge; plain ISO 9660 names otherwise (shown as Linux shows them:
// lower case, without the ";1" version); and multi-extent files.
package iso9660

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// SectorSize is the logical block size of the images this package reads
// (the only size used by CD, DVD and hybrid USB images).
const SectorSize = 2048

// Limits that keep a malformed or hostile image from exhausting memory or
// looping forever.
const (
	maxDirectorySize   = 64 << 20 // bytes of directory records in one directory
	maxEntries         = 1 << 20  // files and directories in the whole image
	maxDepth           = 256      // nested directories
	maxSymlinkHops     = 40       // like Linux's MAXSYMLINKS
	maxVolumeDescs     = 64       // volume descriptors before the terminator
	maxContinuations   = 32       // SUSP continuation areas per directory record
	firstVolumeDescLBA = 16
)

// ErrTruncated is returned (wrapped) by New when the image is shorter than
// its volume descriptor says, e.g. an interrupted download or import.
var ErrTruncated = errors.New("image is truncated")

// ErrNotISO9660 is returned (wrapped) by New when the data is not an ISO
// 9660 image.
var ErrNotISO9660 = errors.New("not an ISO 9660 image")

// Extent is a contiguous run of a file's data inside the image.
type Extent struct {
	// Offset is the byte offset of the run in the image.
	Offset int64
	// Length is the number of bytes in the run.
	Length int64
}

// Image is an opened ISO 9660 image. Its directory tree is read once, when
// the image is opened; file data is read on demand. An Image is safe for
// concurrent use; it implements fs.FS, fs.StatFS and fs.ReadDirFS.
type Image struct {
	r           io.ReaderAt
	closer      io.Closer
	path        string // set by OpenFile
	size        int64
	volumeSize  int64
	names       string
	fingerprint string
	root        *node
	entries     int
}

// node is a file, directory or symbolic link in the tree.
type node struct {
	name     string
	mode     fs.FileMode
	modTime  time.Time
	size     int64
	extents  []Extent // file data; for a directory, its records
	target   string   // symbolic link target
	children []*node  // directories only, sorted by name
	parent   *node
}

// OpenFile opens the image file at path. Close the Image to close the file.
func OpenFile(path string) (*Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	if !st.Mode().IsRegular() {
		return nil, errors.Join(fmt.Errorf("%s is not a regular file", path), f.Close())
	}
	img, err := New(f, st.Size())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", path, err), f.Close())
	}
	img.closer, img.path = f, path
	return img, nil
}

// Reopen opens the image file again, for a caller that moves the file's
// offset, e.g. to let the kernel copy file data to a socket (sendfile).
// It fails for an image not opened by OpenFile.
func (img *Image) Reopen() (*os.File, error) {
	if img.path == "" {
		return nil, errors.New("the image was not opened from a file")
	}
	return os.Open(img.path)
}

// New reads the volume descriptors and the directory tree of the image of
// the given size read through r.
func New(r io.ReaderAt, size int64) (*Image, error) {
	img := &Image{r: r, size: size}
	pvd, joliet, err := img.readVolumeDescriptors()
	if err != nil {
		return nil, err
	}
	volumeSize := int64(binary.LittleEndian.Uint32(pvd[80:84])) * SectorSize
	if size < volumeSize {
		return nil, fmt.Errorf("%w: it has %d bytes but its volume descriptor says %d; the download or import of the ISO did not complete", ErrTruncated, size, volumeSize)
	}
	img.volumeSize = volumeSize
	sum := sha256.Sum256(pvd)
	img.fingerprint = hex.EncodeToString(sum[:8])

	t := &treeReader{img: img, visited: map[int64]bool{}}
	rootRec, err := parseRecord(pvd[156:190])
	if err != nil {
		return nil, fmt.Errorf("%w: root directory record: %w", ErrNotISO9660, err)
	}
	if err := t.detectRockRidge(rootRec); err != nil {
		return nil, err
	}
	switch {
	case t.rockRidge:
		img.names = "Rock Ridge"
	case joliet != nil:
		img.names = "Joliet"
		t.joliet = true
		if rootRec, err = parseRecord(joliet[156:190]); err != nil {
			return nil, fmt.Errorf("%w: Joliet root directory record: %w", ErrNotISO9660, err)
		}
	default:
		img.names = "ISO 9660"
	}
	img.root = &node{mode: fs.ModeDir | 0o555, modTime: rootRec.recorded}
	img.root.parent = img.root
	if err := t.readDir(img.root, rootRec.extent, rootRec.size, "", 0); err != nil {
		return nil, err
	}
	img.entries = t.entries
	return img, nil
}

// Close closes the image file opened by OpenFile.
func (img *Image) Close() error {
	if img.closer == nil {
		return nil
	}
	return img.closer.Close()
}

// VolumeSize is the size in bytes of the ISO 9660 volume as its primary
// volume descriptor records it; the image file may be longer (appended
// partitions of a hybrid image, or padding added by an import).
func (img *Image) VolumeSize() int64 { return img.volumeSize }

// Names says which names the tree uses: "Rock Ridge", "Joliet" or "ISO 9660".
func (img *Image) Names() string { return img.names }

// Entries is the number of files, directories and links in the image.
func (img *Image) Entries() int { return img.entries }

// Fingerprint identifies the image: a hash of its primary volume
// descriptor, which records the volume's creation time and size.
func (img *Image) Fingerprint() string { return img.fingerprint }

// readVolumeDescriptors returns the primary and, if present, the Joliet
// supplementary volume descriptor.
func (img *Image) readVolumeDescriptors() (pvd, joliet []byte, err error) {
	for i := range maxVolumeDescs {
		off := int64(firstVolumeDescLBA+i) * SectorSize
		if off+SectorSize > img.size {
			if pvd == nil {
				return nil, nil, fmt.Errorf("%w: %d bytes is too short for an ISO 9660 volume descriptor at byte %d (a truncated image?)", ErrNotISO9660, img.size, off)
			}
			return nil, nil, fmt.Errorf("%w: the volume descriptor set ends at byte %d without a terminator", ErrTruncated, img.size)
		}
		vd := make([]byte, SectorSize)
		if _, err := img.r.ReadAt(vd, off); err != nil {
			return nil, nil, fmt.Errorf("reading volume descriptor at byte %d: %w", off, err)
		}
		if string(vd[1:6]) != "CD001" {
			return nil, nil, fmt.Errorf("%w: no \"CD001\" signature in the volume descriptor at byte %d", ErrNotISO9660, off)
		}
		switch vd[0] {
		case 1:
			if pvd == nil {
				pvd = vd
			}
		case 2:
			if joliet == nil && isJoliet(vd) {
				joliet = vd
			}
		case 255:
			if pvd == nil {
				return nil, nil, fmt.Errorf("%w: no primary volume descriptor", ErrNotISO9660)
			}
			if bs := binary.LittleEndian.Uint16(pvd[128:130]); bs != SectorSize {
				return nil, nil, fmt.Errorf("logical block size %d is not supported, only %d", bs, SectorSize)
			}
			return pvd, joliet, nil
		}
	}
	return nil, nil, fmt.Errorf("%w: no volume descriptor set terminator in the first %d descriptors", ErrNotISO9660, maxVolumeDescs)
}

// isJoliet reports whether a supplementary volume descriptor declares the
// UCS-2 escape sequences of Joliet levels 1 to 3.
func isJoliet(vd []byte) bool {
	esc := vd[88:120]
	return esc[0] == '%' && esc[1] == '/' && (esc[2] == '@' || esc[2] == 'C' || esc[2] == 'E')
}

// readExtent reads n bytes at the start of the given logical block.
func (img *Image) readExtent(lba, n int64) ([]byte, error) {
	off := lba * SectorSize
	if off < 0 || n < 0 || off+n > img.size {
		return nil, fmt.Errorf("%w: %d bytes at block %d lie past the end of the %d-byte image", ErrTruncated, n, lba, img.size)
	}
	b := make([]byte, n)
	if _, err := img.r.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("reading %d bytes at byte %d: %w", n, off, err)
	}
	return b, nil
}

var (
	_ fs.StatFS    = (*Image)(nil)
	_ fs.ReadDirFS = (*Image)(nil)
	_ io.ReaderAt  = (*File)(nil)
	_ io.Seeker    = (*File)(nil)
)
