package iso9660_test

import (
	"bytes"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/harvester/upgrade-toolkit/internal/repo/iso9660"
	"github.com/harvester/upgrade-toolkit/internal/repo/isotest"
)

// FuzzNew reads images that are anything but well formed: a real image
// mutated at random, cut short or foreign. Opening one either fails with an
// error or gives a tree every file of which reads to its stated size without
// a panic, an endless loop or a read outside the image.
func FuzzNew(f *testing.F) {
	dir := f.TempDir()
	tree := filepath.Join(dir, "tree")
	for name, data := range map[string]string{"a.txt": "alpha", "d/b.txt": "beta", "d/e/c.txt": "gamma"} {
		p := filepath.Join(tree, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			f.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	iso := filepath.Join(dir, "small.iso")
	isotest.Build(f, tree, iso, "-joliet", "on")
	good, err := os.ReadFile(iso)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 40*iso9660.SectorSize))
	f.Fuzz(func(t *testing.T, data []byte) {
		img, err := iso9660.New(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		err = fs.WalkDir(img, ".", func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			file, err := img.Open(path)
			if err != nil {
				return nil // a name the tree lists may still fail to open; it must not panic
			}
			defer func() { _ = file.Close() }()
			st, err := file.Stat()
			if err != nil {
				t.Fatalf("stat %s: %v", path, err)
			}
			n, err := io.Copy(io.Discard, io.LimitReader(file, st.Size()+1))
			if err == nil && n != st.Size() {
				t.Fatalf("%s read %d bytes, states %d", path, n, st.Size())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
