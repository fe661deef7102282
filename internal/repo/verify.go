package repo

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/harvester/upgrade-toolkit/internal/repo/iso9660"
)

// ParseSHA512 checks that s is a hex SHA-512 digest and returns its bytes.
func ParseSHA512(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha512.Size {
		hint := ""
		if len(s) == 2*32 {
			hint = " (64 digits look like a SHA-256 digest)"
		}
		return nil, fmt.Errorf("the ISO checksum %q is not a SHA-512 digest: want %d hexadecimal digits, got %d characters%s; set the Version's isoChecksum to the ISO's sha512sum", s, 2*sha512.Size, len(s), hint)
	}
	return b, nil
}

// verifyBuffer is how much of the image is hashed per read.
const verifyBuffer = 1 << 20

// verifyChecksum compares the SHA-512 of the image with want. The image
// file may be longer than the ISO that was published: CDI grows disk.img to
// the size of its volume with zeros. So the digest is accepted for the
// whole file or for any prefix that covers the ISO volume and is followed
// only by zeros. progress is called after each read with the bytes hashed.
// A mismatch is a *Failure.
func verifyChecksum(ctx context.Context, r io.ReaderAt, size int64, img *iso9660.Image, want []byte, progress func(done int64)) error {
	h := sha512.New()
	buf := make([]byte, verifyBuffer)
	zero := make([]byte, iso9660.SectorSize)
	sum := make([]byte, 0, sha512.Size)
	matched := int64(-1) // prefix length whose digest matched, if still followed only by zeros
	volumeEnd := img.VolumeSize()
	for off := int64(0); off < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if err != nil && (err != io.EOF || int64(n) < min(int64(len(buf)), size-off)) {
			return fmt.Errorf("reading the ISO at byte %d for its checksum: %w", off, err)
		}
		chunk := buf[:n]
		// Up to the volume's end everything is ISO content.
		if head := max(0, min(int64(n), volumeEnd-off)); head > 0 {
			h.Write(chunk[:head])
			chunk, off = chunk[head:], off+head
		}
		// Past it, each all-zero sector may start the padding.
		for len(chunk) > 0 {
			sector := chunk[:min(len(chunk), iso9660.SectorSize)]
			if bytes.Equal(sector, zero[:len(sector)]) {
				if bytes.Equal(h.Sum(sum[:0]), want) {
					matched = off
				}
			} else {
				matched = -1
			}
			h.Write(sector)
			chunk, off = chunk[len(sector):], off+int64(len(sector))
		}
		if progress != nil {
			progress(off)
		}
	}
	actual := h.Sum(nil)
	if bytes.Equal(actual, want) || matched >= 0 {
		return nil
	}
	return &Failure{
		ExitCode: ExitCodeChecksumMismatch,
		Message: fmt.Sprintf("ISO checksum mismatch: expected SHA-512 %x, actual %x (the whole %d-byte image; no shorter image followed only by zero padding matches either). "+
			"The downloaded ISO is corrupt or is not the release this checksum belongs to: check the Version's isoURL and isoChecksum, then delete the ISO's VirtualMachineImage so that it is downloaded again.",
			want, actual, size),
	}
}
