package iso9660

import (
	"encoding/binary"
	"fmt"
	"time"
)

// Directory records (ECMA-119 9.1) and their timestamps.

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
