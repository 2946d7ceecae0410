package mysqlstore

import (
	"database/sql/driver"
	"fmt"
	"time"
)

// sqlTime scans a DATETIME(3) that the driver may hand over as time.Time
// (parseTime=true, the normal case) or as bytes (a DSN without it).
type sqlTime struct{ time.Time }

func (t *sqlTime) Scan(v any) error {
	switch x := v.(type) {
	case time.Time:
		t.Time = x.UTC()
	case []byte:
		return t.parse(string(x))
	case string:
		return t.parse(x)
	case nil:
		t.Time = time.Time{}
	default:
		return fmt.Errorf("mysqlstore: cannot scan %T into a time", v)
	}
	return nil
}

func (t *sqlTime) parse(s string) error {
	p, err := time.ParseInLocation("2006-01-02 15:04:05.999999", s, time.UTC)
	if err != nil {
		return fmt.Errorf("mysqlstore: parse time %q: %w", s, err)
	}
	t.Time = p
	return nil
}

// Value lets an sqlTime be a parameter.
func (t sqlTime) Value() (driver.Value, error) { return t.Time, nil }
