package iso9660

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"unicode/utf16"
)

// The directory tree, read once when the image is opened.

// treeReader reads the directory tree once, at open.
type treeReader struct {
	img       *Image
	rockRidge bool
	joliet    bool
	suspSkip  int
	visited   map[int64]bool
	entries   int
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
