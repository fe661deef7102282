package iso9660

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"path"
	"slices"
	"strings"
	"time"
)

// The image as an fs.FS: name resolution, files and directories.

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
