package iso9660

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The System Use Sharing Protocol and its Rock Ridge fields (names, modes,
// times, symbolic links, relocated directories).

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
