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
	"iter"
	"os"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf16"
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

// record is a parsed directory record.
type record struct {
	extent    int64 // logical block of the data
	size      int64
	recorded  time.Time
	flags     byte
	id        []byte
	systemUse []byte
}

const (
	flagDirectory   = 0x02
	flagAssociated  = 0x04
	flagMultiExtent = 0x80
)

func parseRecord(b []byte) (record, error) {
	if len(b) < 34 || int(b[0]) > len(b) || b[0] < 34 {
		return record{}, fmt.Errorf("directory record of %d bytes is too short", len(b))
	}
	b = b[:b[0]]
	idLen := int(b[32])
	if 33+idLen > len(b) {
		return record{}, fmt.Errorf("directory record identifier of %d bytes overruns the record", idLen)
	}
	rec := record{
		extent:   int64(binary.LittleEndian.Uint32(b[2:6])) + int64(b[1]), // data follows the extended attribute record
		size:     int64(binary.LittleEndian.Uint32(b[10:14])),
		recorded: recordTime(b[18:25]),
		flags:    b[25],
		id:       b[33 : 33+idLen],
	}
	su := 33 + idLen
	if idLen%2 == 0 {
		su++ // padding byte
	}
	if su < len(b) {
		rec.systemUse = b[su:]
	}
	return rec, nil
}

// recordTime decodes the 7-byte date of a directory record.
func recordTime(b []byte) time.Time {
	if b[1] == 0 || b[2] == 0 {
		return time.Time{}
	}
	loc := time.FixedZone("", int(int8(b[6]))*15*60)
	return time.Date(1900+int(b[0]), time.Month(b[1]), int(b[2]), int(b[3]), int(b[4]), int(b[5]), 0, loc).UTC()
}

// longTime decodes the 17-byte "YYYYMMDDHHMMSScc" + zone offset format.
func longTime(b []byte) time.Time {
	var v [7]int // year, month, day, hour, minute, second, centisecond
	for i := range v {
		start, width := 4+2*(i-1), 2
		if i == 0 {
			start, width = 0, 4
		}
		for _, c := range b[start : start+width] {
			if c < '0' || c > '9' {
				return time.Time{}
			}
			v[i] = v[i]*10 + int(c-'0')
		}
	}
	if v[1] == 0 || v[2] == 0 {
		return time.Time{}
	}
	loc := time.FixedZone("", int(int8(b[16]))*15*60)
	return time.Date(v[0], time.Month(v[1]), v[2], v[3], v[4], v[5], v[6]*10_000_000, loc).UTC()
}

// treeReader reads the directory tree once, at open.
type treeReader struct {
	img       *Image
	rockRidge bool
	joliet    bool
	suspSkip  int
	visited   map[int64]bool
	entries   int
}

// detectRockRidge looks at the root's "." record: SUSP is in use when it
// starts with an SP entry, and Rock Ridge when an ER entry names RRIP or a
// Rock Ridge field is present.
func (t *treeReader) detectRockRidge(root record) error {
	data, err := t.img.readExtent(root.extent, min(root.size, SectorSize))
	if err != nil {
		return fmt.Errorf("reading the root directory: %w", err)
	}
	dot, err := parseRecord(data)
	if err != nil {
		return fmt.Errorf("%w: root directory \".\" record: %w", ErrNotISO9660, err)
	}
	su := dot.systemUse
	if len(su) < 7 || string(su[0:2]) != "SP" || su[4] != 0xBE || su[5] != 0xEF {
		return nil
	}
	t.suspSkip = int(su[6])
	entries, err := t.suspEntries(su)
	if err != nil {
		return fmt.Errorf("root directory system use area: %w", err)
	}
	for _, e := range entries {
		switch e.sig {
		case "ER":
			if len(e.data) >= 4 && 4+int(e.data[0]) <= len(e.data) {
				id := string(e.data[4 : 4+int(e.data[0])])
				if id == "RRIP_1991A" || id == "IEEE_P1282" || id == "IEEE_1282" {
					t.rockRidge = true
				}
			}
		case "RR", "PX", "NM":
			t.rockRidge = true
		}
	}
	return nil
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

type suspEntry struct {
	sig  string
	data []byte
}

// suspEntries splits a system use area into its entries, following
// continuation areas (CE) and stopping at a terminator (ST).
func (t *treeReader) suspEntries(area []byte) ([]suspEntry, error) {
	var out []suspEntry
	for hops := 0; area != nil; hops++ {
		if hops > maxContinuations {
			return nil, fmt.Errorf("more than %d SUSP continuation areas", maxContinuations)
		}
		var next []byte
	entries:
		for len(area) >= 4 {
			n := int(area[2])
			if n < 4 || n > len(area) {
				break // padding or a damaged tail: ignore it, as Linux does
			}
			e := suspEntry{sig: string(area[0:2]), data: area[4:n]}
			area = area[n:]
			switch e.sig {
			case "ST":
				break entries
			case "CE":
				if len(e.data) < 24 {
					return nil, fmt.Errorf("CE entry of %d bytes", len(e.data))
				}
				block := int64(binary.LittleEndian.Uint32(e.data[0:4]))
				offset := int64(binary.LittleEndian.Uint32(e.data[8:12]))
				length := int64(binary.LittleEndian.Uint32(e.data[16:20]))
				if offset+length > SectorSize {
					return nil, fmt.Errorf("continuation area of %d bytes at offset %d crosses its block", length, offset)
				}
				b, err := t.img.readExtent(block, offset+length)
				if err != nil {
					return nil, fmt.Errorf("continuation area: %w", err)
				}
				next = b[offset:]
			default:
				out = append(out, e)
			}
		}
		area = next
	}
	return out, nil
}

// readDir reads the directory at block lba into dir, recursively.
func (t *treeReader) readDir(dir *node, lba, size int64, dirPath string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("directory %q is nested more than %d levels deep", dirPath, maxDepth)
	}
	if t.visited[lba] {
		return fmt.Errorf("directory %q at block %d is reached twice: the directory tree has a loop", dirPath, lba)
	}
	t.visited[lba] = true
	if size > maxDirectorySize {
		return fmt.Errorf("directory %q has %d bytes of records, more than the limit of %d", dirPath, size, maxDirectorySize)
	}
	data, err := t.img.readExtent(lba, size)
	if err != nil {
		return fmt.Errorf("directory %q: %w", dirPath, err)
	}
	var pending *node // a multi-extent file waiting for its next extent
	for pos := 0; pos < len(data); {
		if data[pos] == 0 { // records never cross a sector: skip to the next
			pos = (pos/SectorSize + 1) * SectorSize
			continue
		}
		n := int(data[pos])
		if n < 34 || pos%SectorSize+n > SectorSize || pos+n > len(data) {
			return fmt.Errorf("directory %q: damaged record at byte %d of the directory", dirPath, pos)
		}
		rec, err := parseRecord(data[pos : pos+n])
		pos += n
		if err != nil {
			return fmt.Errorf("directory %q: %w", dirPath, err)
		}
		if len(rec.id) == 1 && rec.id[0] <= 1 { // "." and ".."
			continue
		}
		if pending != nil { // the next part of a multi-extent file
			if err := t.addExtent(pending, rec, dirPath); err != nil {
				return err
			}
			if rec.flags&flagMultiExtent == 0 {
				pending = nil
			}
			continue
		}
		child, skip, err := t.newNode(rec, dirPath)
		if err != nil {
			return err
		}
		if skip {
			continue
		}
		if rec.flags&flagMultiExtent != 0 {
			pending = child
		}
		if t.entries++; t.entries > maxEntries {
			return fmt.Errorf("the image has more than %d entries", maxEntries)
		}
		child.parent = dir
		dir.children = append(dir.children, child)
	}
	if pending != nil {
		return fmt.Errorf("file %q: its last extent is missing", path.Join(dirPath, pending.name))
	}
	slices.SortStableFunc(dir.children, func(a, b *node) int { return strings.Compare(a.name, b.name) })
	// Keep the first of duplicate names (plain names folded to lower case
	// can collide), so that lookups are deterministic.
	dir.children = slices.CompactFunc(dir.children, func(a, b *node) bool { return a.name == b.name })
	for _, c := range dir.children {
		if c.mode.IsDir() {
			lba, size := c.extents[0].Offset/SectorSize, c.extents[0].Length
			if err := t.readDir(c, lba, size, path.Join(dirPath, c.name), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// addExtent appends the data of a continuation record to a multi-extent file.
func (t *treeReader) addExtent(n *node, rec record, dirPath string) error {
	e := Extent{Offset: rec.extent * SectorSize, Length: rec.size}
	if e.Offset+e.Length > t.img.size {
		return fmt.Errorf("%w: file %q has data at bytes %d-%d, past the end of the %d-byte image", ErrTruncated, path.Join(dirPath, n.name), e.Offset, e.Offset+e.Length, t.img.size)
	}
	switch last := len(n.extents) - 1; {
	case e.Length == 0:
	case last >= 0 && n.extents[last].Offset+n.extents[last].Length == e.Offset:
		n.extents[last].Length += e.Length // contiguous: one run
	default:
		n.extents = append(n.extents, e)
	}
	n.size += rec.size
	return nil
}

// newNode makes the node of a directory record; skip reports records that
// are not shown (associated files, relocated directories in their
// relocation directory, devices).
func (t *treeReader) newNode(rec record, dirPath string) (n *node, skip bool, err error) {
	if rec.flags&flagAssociated != 0 {
		return nil, true, nil
	}
	n = &node{name: t.plainName(rec), modTime: rec.recorded, mode: 0o444}
	isDir := rec.flags&flagDirectory != 0
	dirLBA, dirSize := rec.extent, rec.size
	if t.rockRidge {
		fields, err := t.suspEntries(rec.systemUse[min(t.suspSkip, len(rec.systemUse)):])
		if err != nil {
			return nil, false, fmt.Errorf("directory %q, entry %q: %w", dirPath, n.name, err)
		}
		rr, err := parseRockRidge(fields)
		if err != nil {
			return nil, false, fmt.Errorf("directory %q, entry %q: %w", dirPath, n.name, err)
		}
		if rr.relocated {
			return nil, true, nil
		}
		if rr.name != "" {
			n.name = rr.name
		}
		if !rr.modTime.IsZero() {
			n.modTime = rr.modTime
		}
		if rr.hasMode {
			switch rr.mode & 0o170000 {
			case 0o040000:
				isDir = true
			case 0o100000:
			case 0o120000:
				n.mode = fs.ModeSymlink | 0o777
				n.target = rr.target
				return n, false, nil
			default:
				return nil, true, nil // devices, pipes and sockets are not served
			}
			n.mode = fs.FileMode(rr.mode & 0o777)
		}
		if rr.childLink >= 0 { // a deep directory relocated elsewhere
			isDir = true
			dirLBA = rr.childLink
			dot, err := t.img.readExtent(dirLBA, 34)
			if err != nil {
				return nil, false, fmt.Errorf("directory %q, relocated entry %q: %w", dirPath, n.name, err)
			}
			dirSize = int64(binary.LittleEndian.Uint32(dot[10:14]))
		}
	}
	if n.name == "" || n.name == "." || n.name == ".." || strings.ContainsAny(n.name, "/\x00") {
		return nil, false, fmt.Errorf("directory %q has an entry with the invalid name %q", dirPath, n.name)
	}
	if isDir {
		n.mode |= fs.ModeDir | 0o111
		n.extents = []Extent{{Offset: dirLBA * SectorSize, Length: dirSize}}
		return n, false, nil
	}
	if err := t.addExtent(n, rec, dirPath); err != nil {
		return nil, false, err
	}
	return n, false, nil
}

// plainName is the name of a record without Rock Ridge: the Joliet name, or
// the ISO 9660 name in lower case without its version and trailing dot, as
// Linux shows it.
func (t *treeReader) plainName(rec record) string {
	id := rec.id
	var name string
	if t.joliet {
		u := make([]uint16, len(id)/2)
		for i := range u {
			u[i] = binary.BigEndian.Uint16(id[2*i:])
		}
		name = string(utf16.Decode(u))
	} else {
		name = strings.ToLower(string(id))
	}
	if rec.flags&flagDirectory == 0 {
		if i := strings.LastIndexByte(name, ';'); i >= 0 {
			name = name[:i]
		}
		if !t.joliet {
			name = strings.TrimSuffix(name, ".")
		}
	}
	return name
}

// rockRidge holds the Rock Ridge fields of one directory record.
type rockRidge struct {
	name      string
	hasMode   bool
	mode      uint32
	modTime   time.Time
	target    string
	childLink int64
	relocated bool
}

func parseRockRidge(fields []suspEntry) (rockRidge, error) {
	rr := rockRidge{childLink: -1}
	var name strings.Builder
	var target []string
	var partial strings.Builder // a symlink component continued in the next SL
	for _, f := range fields {
		d := f.data
		switch f.sig {
		case "NM":
			if len(d) < 1 {
				return rr, errors.New("empty Rock Ridge NM field")
			}
			if d[0]&0x06 == 0 { // not "." or ".."
				name.Write(d[1:])
			}
		case "PX":
			if len(d) < 8 {
				return rr, errors.New("short Rock Ridge PX field")
			}
			rr.hasMode, rr.mode = true, binary.LittleEndian.Uint32(d[0:4])
		case "TF":
			rr.modTime = tfModTime(d)
		case "CL":
			if len(d) < 8 {
				return rr, errors.New("short Rock Ridge CL field")
			}
			rr.childLink = int64(binary.LittleEndian.Uint32(d[0:4]))
		case "RE":
			rr.relocated = true
		case "SL":
			if len(d) < 1 {
				return rr, errors.New("empty Rock Ridge SL field")
			}
			for c := d[1:]; len(c) >= 2; {
				flags, n := c[0], int(c[1])
				if 2+n > len(c) {
					return rr, errors.New("damaged Rock Ridge SL component")
				}
				switch {
				case flags&0x02 != 0:
					target = append(target, ".")
				case flags&0x04 != 0:
					target = append(target, "..")
				case flags&0x08 != 0:
					target = append(target, "")
				default:
					partial.Write(c[2 : 2+n])
					if flags&0x01 == 0 {
						target = append(target, partial.String())
						partial.Reset()
					}
				}
				c = c[2+n:]
			}
		}
	}
	rr.name = name.String()
	rr.target = strings.Join(target, "/")
	if len(target) == 1 && target[0] == "" {
		rr.target = "/"
	}
	return rr, nil
}

// tfModTime returns the modification time of a Rock Ridge TF field.
func tfModTime(d []byte) time.Time {
	if len(d) < 1 {
		return time.Time{}
	}
	flags := d[0]
	width := 7
	if flags&0x80 != 0 {
		width = 17
	}
	pos := 1
	if flags&0x01 != 0 { // creation time comes first
		pos += width
	}
	if flags&0x02 == 0 || pos+width > len(d) {
		return time.Time{}
	}
	if width == 17 {
		return longTime(d[pos : pos+width])
	}
	return recordTime(d[pos : pos+width])
}

// resolve finds the node at name (a valid fs path), following symbolic
// links inside the image. A link cannot leave the image: ".." at the root
// stays at the root and absolute targets start at the image's root.
func (img *Image) resolve(name string, followLast bool) (*node, error) {
	if name == "." {
		return img.root, nil
	}
	pending := strings.Split(name, "/")
	cur, hops := img.root, 0
	for len(pending) > 0 {
		comp := pending[0]
		pending = pending[1:]
		switch comp {
		case "", ".":
			continue
		case "..":
			cur = cur.parent
			continue
		}
		if !cur.mode.IsDir() {
			return nil, fs.ErrNotExist
		}
		next := cur.child(comp)
		if next == nil {
			return nil, fs.ErrNotExist
		}
		if next.mode&fs.ModeSymlink != 0 && (len(pending) > 0 || followLast) {
			if hops++; hops > maxSymlinkHops {
				return nil, fmt.Errorf("too many levels of symbolic links at %q", comp)
			}
			if strings.HasPrefix(next.target, "/") {
				cur = img.root
			}
			pending = append(strings.Split(next.target, "/"), pending...)
			continue
		}
		cur = next
	}
	return cur, nil
}

func (n *node) child(name string) *node {
	i, ok := slices.BinarySearchFunc(n.children, name, func(c *node, name string) int { return strings.Compare(c.name, name) })
	if !ok {
		return nil
	}
	return n.children[i]
}

// Open opens the named file or directory; symbolic links are followed.
func (img *Image) Open(name string) (fs.File, error) {
	n, err := img.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if n.mode.IsDir() {
		return &dir{img: img, n: n}, nil
	}
	return &File{img: img, n: n}, nil
}

// Stat describes the named file or directory; symbolic links are followed.
func (img *Image) Stat(name string) (fs.FileInfo, error) {
	n, err := img.lookup("stat", name)
	if err != nil {
		return nil, err
	}
	return fileInfo{n}, nil
}

// ReadDir lists the named directory, sorted by name.
func (img *Image) ReadDir(name string) ([]fs.DirEntry, error) {
	n, err := img.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	if !n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	return img.entriesOf(n), nil
}

func (img *Image) lookup(op, name string) (*node, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	n, err := img.resolve(name, true)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	if n.mode&fs.ModeSymlink != 0 {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	if base := path.Base(name); name != "." && n.name != base {
		// Reached through a link: it carries the name it was asked by.
		alias := *n
		alias.name = base
		n = &alias
	}
	return n, nil
}

// entriesOf lists a directory; a symbolic link is listed as what it points
// to, and a dangling one is left out.
func (img *Image) entriesOf(n *node) []fs.DirEntry {
	out := make([]fs.DirEntry, 0, len(n.children))
	for _, c := range n.children {
		info := c
		if c.mode&fs.ModeSymlink != 0 {
			target, err := img.resolve(path.Join(c.parent.pathFromRoot(), c.name), true)
			if err != nil || target.mode&fs.ModeSymlink != 0 {
				continue
			}
			info = &node{name: c.name, mode: target.mode, modTime: target.modTime, size: target.size}
		}
		out = append(out, fs.FileInfoToDirEntry(fileInfo{info}))
	}
	return out
}

func (n *node) pathFromRoot() string {
	var parts []string
	for ; n.parent != n; n = n.parent {
		parts = append(parts, n.name)
	}
	slices.Reverse(parts)
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

// fileInfo describes a node.
type fileInfo struct{ n *node }

func (fi fileInfo) Name() string {
	if fi.n.parent == fi.n {
		return "."
	}
	return fi.n.name
}
func (fi fileInfo) Size() int64        { return fi.n.size }
func (fi fileInfo) Mode() fs.FileMode  { return fi.n.mode }
func (fi fileInfo) ModTime() time.Time { return fi.n.modTime }
func (fi fileInfo) IsDir() bool        { return fi.n.mode.IsDir() }
func (fi fileInfo) Sys() any           { return nil }

// File is an open regular file of the image. Besides fs.File it offers
// io.ReaderAt and io.Seeker; ReadAt is safe for concurrent use.
type File struct {
	img *Image
	n   *node
	pos int64
}

// Stat describes the file.
func (f *File) Stat() (fs.FileInfo, error) { return fileInfo{f.n}, nil }

// Close does nothing: the image stays open.
func (f *File) Close() error { return nil }

// Extents are the runs of the file's data in the image, in order.
func (f *File) Extents() []Extent { return slices.Clone(f.n.extents) }

// Read reads from the current position.
func (f *File) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	return n, err
}

// Seek sets the position of the next Read.
func (f *File) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.pos
	case io.SeekEnd:
		offset += f.n.size
	default:
		return f.pos, fmt.Errorf("seek: invalid whence %d", whence)
	}
	if offset < 0 {
		return f.pos, fmt.Errorf("seek: negative position %d", offset)
	}
	f.pos = offset
	return offset, nil
}

// Spans yields where the file's bytes [off, off+n) lie in the image, in
// order: one Extent per stored run, cut to the range and the file's end.
// Every read of the file's data walks its extents here.
func (f *File) Spans(off, n int64) iter.Seq[Extent] {
	return func(yield func(Extent) bool) {
		for _, e := range f.n.extents {
			if n <= 0 {
				return
			}
			if off >= e.Length {
				off -= e.Length
				continue
			}
			chunk := min(n, e.Length-off)
			if !yield(Extent{Offset: e.Offset + off, Length: chunk}) {
				return
			}
			n, off = n-chunk, 0
		}
	}
}

// ReadAt reads len(p) bytes at offset off of the file.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read: negative offset %d", off)
	}
	if off >= f.n.size {
		return 0, io.EOF
	}
	want := len(p)
	if rest := f.n.size - off; int64(want) > rest {
		want = int(rest)
	}
	done := 0
	for e := range f.Spans(off, int64(want)) {
		chunk := int(e.Length)
		n, err := f.img.r.ReadAt(p[done:done+chunk], e.Offset)
		done += n
		if n < chunk {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: %w", ErrTruncated, io.ErrUnexpectedEOF)
			}
			return done, err
		}
	}
	if done < len(p) {
		return done, io.EOF
	}
	return done, nil
}

// dir is an open directory.
type dir struct {
	img  *Image
	n    *node
	read int
}

func (d *dir) Stat() (fs.FileInfo, error) { return fileInfo{d.n}, nil }
func (d *dir) Close() error               { return nil }
func (d *dir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.n.name, Err: errors.New("is a directory")}
}

// ReadDir implements fs.ReadDirFile.
func (d *dir) ReadDir(count int) ([]fs.DirEntry, error) {
	all := d.img.entriesOf(d.n)
	rest := all[min(d.read, len(all)):]
	if count <= 0 {
		d.read = len(all)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	rest = rest[:min(count, len(rest))]
	d.read += len(rest)
	return rest, nil
}

var (
	_ fs.StatFS    = (*Image)(nil)
	_ fs.ReadDirFS = (*Image)(nil)
	_ io.ReaderAt  = (*File)(nil)
	_ io.Seeker    = (*File)(nil)
)
