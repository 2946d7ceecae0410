package reservation

import (
	"fmt"
	"time"
)

// MaxTokenBytes is the longest token accepted.
const MaxTokenBytes = 64

// Limits bound what a caller may ask for. The zero value of each field takes
// its default (see WithDefaults).
type Limits struct {
	// MaxQuantity is the largest quantity of one line. Default: 1000, the
	// MySQL store's default pool cap: a line must fit in one pool.
	MaxQuantity int64
	// MaxLines is the largest number of lines in a cart. Default: 100.
	MaxLines int
	// MaxLocations is the largest number of eligible locations of a line.
	// Default: 50.
	MaxLocations int
	// MinTTL is the shortest hold. Default: 1s.
	MinTTL time.Duration
	// MaxTTL is the longest hold. Default: 1h.
	MaxTTL time.Duration
	// MaxStock is the largest stock a ledger row may hold. Default: 1e9.
	MaxStock int64
}

// DefaultLimits are the limits used when a store is given none.
var DefaultLimits = Limits{}.WithDefaults()

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.MaxQuantity == 0 {
		l.MaxQuantity = 1000
	}
	if l.MaxLines == 0 {
		l.MaxLines = 100
	}
	if l.MaxLocations == 0 {
		l.MaxLocations = 50
	}
	if l.MinTTL == 0 {
		l.MinTTL = time.Second
	}
	if l.MaxTTL == 0 {
		l.MaxTTL = time.Hour
	}
	if l.MaxStock == 0 {
		l.MaxStock = 1_000_000_000
	}
	return l
}

// Validate reports a limit that makes no sense.
func (l Limits) Validate() error {
	switch {
	case l.MaxQuantity < 1:
		return fmt.Errorf("reservation: limits: MaxQuantity must be >= 1, got %d", l.MaxQuantity)
	case l.MaxLines < 1:
		return fmt.Errorf("reservation: limits: MaxLines must be >= 1, got %d", l.MaxLines)
	case l.MaxLocations < 1:
		return fmt.Errorf("reservation: limits: MaxLocations must be >= 1, got %d", l.MaxLocations)
	case l.MinTTL < time.Millisecond:
		return fmt.Errorf("reservation: limits: MinTTL must be >= 1ms, got %s", l.MinTTL)
	case l.MaxTTL < l.MinTTL:
		return fmt.Errorf("reservation: limits: MaxTTL %s is below MinTTL %s", l.MaxTTL, l.MinTTL)
	case l.MaxStock < 1:
		return fmt.Errorf("reservation: limits: MaxStock must be >= 1, got %d", l.MaxStock)
	}
	return nil
}

func validShop(shop int64) error {
	if shop <= 0 {
		return invalid("shop", "must be a positive id, got %d", shop)
	}
	return nil
}

func validToken(token string) error { return validKey("token", token) }

// validKey checks an idempotency key (a token, an adjust's key) in field.
func validKey(field, key string) error {
	switch {
	case key == "":
		return invalid(field, "must not be empty")
	case len(key) > MaxTokenBytes:
		return invalid(field, "must be at most %d bytes, got %d", MaxTokenBytes, len(key))
	}
	for i := 0; i < len(key); i++ {
		// Printable ASCII only: keys land in logs, store keys and URLs.
		if c := key[i]; c < 0x21 || c > 0x7e {
			return invalid(field, "must be printable ASCII without spaces (byte %d is 0x%02x)", i, c)
		}
	}
	return nil
}

func validShopToken(shop int64, token string) error {
	if err := validShop(shop); err != nil {
		return err
	}
	return validToken(token)
}

// ValidateReserve checks p against l.
func (l Limits) ValidateReserve(p *ReserveParams) error {
	if p == nil {
		return invalid("params", "missing")
	}
	if err := validShopToken(p.Shop, p.Token); err != nil {
		return err
	}
	if p.TTL < l.MinTTL || p.TTL > l.MaxTTL {
		return invalid("ttl", "must be between %s and %s, got %s", l.MinTTL, l.MaxTTL, p.TTL)
	}
	if p.Authority != "" && !p.Authority.Valid() {
		return invalid("authority", "must be %q or %q, got %q", AuthorityRedis, AuthorityMySQL, p.Authority)
	}
	if len(p.Compare) > MaxCompareLabel {
		return invalid("compare", "at most %d bytes, got %d", MaxCompareLabel, len(p.Compare))
	}
	return l.validateLines(p.Lines)
}

// ValidateCart checks a cart's lines alone, as ValidateReserve does.
func (l Limits) ValidateCart(lines []Line) error {
	return l.validateLines(lines)
}

func (l Limits) validateLines(lines []Line) error {
	if len(lines) == 0 {
		return invalid("lines", "must have at least one line")
	}
	if len(lines) > l.MaxLines {
		return invalid("lines", "at most %d lines, got %d", l.MaxLines, len(lines))
	}
	seen := make(map[int64]int, len(lines))
	for i, ln := range lines {
		f := fmt.Sprintf("lines[%d]", i)
		if ln.Item <= 0 {
			return invalid(f+".item", "must be a positive id, got %d", ln.Item)
		}
		if j, dup := seen[ln.Item]; dup {
			return invalid(f+".item", "item %d is already in lines[%d]", ln.Item, j)
		}
		seen[ln.Item] = i
		if ln.Quantity < 1 || ln.Quantity > l.MaxQuantity {
			return invalid(f+".quantity", "must be between 1 and %d, got %d", l.MaxQuantity, ln.Quantity)
		}
		if len(ln.Locations) == 0 {
			return invalid(f+".locations", "must name at least one location")
		}
		if len(ln.Locations) > l.MaxLocations {
			return invalid(f+".locations", "at most %d locations, got %d", l.MaxLocations, len(ln.Locations))
		}
		locs := make(map[int64]bool, len(ln.Locations))
		for k, loc := range ln.Locations {
			if loc <= 0 {
				return invalid(fmt.Sprintf("%s.locations[%d]", f, k), "must be a positive id, got %d", loc)
			}
			if locs[loc] {
				return invalid(fmt.Sprintf("%s.locations[%d]", f, k), "location %d is listed twice", loc)
			}
			locs[loc] = true
		}
	}
	return nil
}

// ValidateClaim checks p.
func (l Limits) ValidateClaim(p *ClaimParams) error {
	if p == nil {
		return invalid("params", "missing")
	}
	if err := validShopToken(p.Shop, p.Token); err != nil {
		return err
	}
	if p.As != AsAuthority && p.As != AsShadow {
		return invalid("as", "unknown role %d", p.As)
	}
	if p.As == AsShadow {
		return l.validAllocations("deducted", p.Deducted, true)
	}
	return nil
}

// ValidateRelease checks p.
func (l Limits) ValidateRelease(p *ReleaseParams) error {
	if p == nil {
		return invalid("params", "missing")
	}
	return validShopToken(p.Shop, p.Token)
}

// ValidateGet checks p.
func (l Limits) ValidateGet(p *GetParams) error {
	if p == nil {
		return invalid("params", "missing")
	}
	return validShopToken(p.Shop, p.Token)
}

// ValidateAdjust checks p.
func (l Limits) ValidateAdjust(p *AdjustParams) error {
	if p == nil {
		return invalid("params", "missing")
	}
	if err := validShop(p.Shop); err != nil {
		return err
	}
	if p.Item <= 0 {
		return invalid("item", "must be a positive id, got %d", p.Item)
	}
	if p.Location <= 0 {
		return invalid("location", "must be a positive id, got %d", p.Location)
	}
	switch {
	case p.As != AsAuthority && p.As != AsShadow:
		return invalid("as", "unknown role %d", p.As)
	case p.Available != nil && p.Delta != 0:
		return invalid("available", "give either available or delta, not both")
	case p.Available != nil && p.As == AsShadow:
		return invalid("available", "a shadow follows the authority's delta; available is not allowed")
	case p.Available != nil && (*p.Available < 0 || *p.Available > l.MaxStock):
		return invalid("available", "must be between 0 and %d, got %d", l.MaxStock, *p.Available)
	case p.Available == nil && p.Delta == 0:
		return invalid("delta", "give available, or a non-zero delta")
	case p.Delta > l.MaxStock || p.Delta < -l.MaxStock:
		return invalid("delta", "must be within ±%d, got %d", l.MaxStock, p.Delta)
	}
	if p.Key != "" {
		return validKey("key", p.Key)
	}
	return nil
}

// ValidateAvailability checks p.
func (l Limits) ValidateAvailability(p *AvailabilityParams) error {
	if p == nil {
		return invalid("params", "missing")
	}
	if err := validShop(p.Shop); err != nil {
		return err
	}
	if p.Item <= 0 {
		return invalid("item", "must be a positive id, got %d", p.Item)
	}
	return nil
}

// ValidateDeduct checks p.
func (l Limits) ValidateDeduct(p *DeductParams) error {
	if p == nil {
		return invalid("params", "missing")
	}
	if err := validShopToken(p.Shop, p.Token); err != nil {
		return err
	}
	return l.validAllocations("allocations", p.Allocations, false)
}

func (l Limits) validAllocations(field string, as []Allocation, emptyOK bool) error {
	if len(as) == 0 && !emptyOK {
		return invalid(field, "must have at least one allocation")
	}
	if len(as) > l.MaxLines {
		return invalid(field, "at most %d allocations, got %d", l.MaxLines, len(as))
	}
	type key struct{ item, loc int64 }
	seen := make(map[key]bool, len(as))
	for i, a := range as {
		f := fmt.Sprintf("%s[%d]", field, i)
		switch {
		case a.Item <= 0:
			return invalid(f+".item", "must be a positive id, got %d", a.Item)
		case a.Location <= 0:
			return invalid(f+".location", "must be a positive id, got %d", a.Location)
		case a.Quantity < 1 || a.Quantity > l.MaxQuantity:
			return invalid(f+".quantity", "must be between 1 and %d, got %d", l.MaxQuantity, a.Quantity)
		case seen[key{a.Item, a.Location}]:
			return invalid(f, "item %d at location %d is listed twice", a.Item, a.Location)
		}
		seen[key{a.Item, a.Location}] = true
	}
	return nil
}

// ValidateReap checks p.
func (l Limits) ValidateReap(p *ReapParams) error {
	if p == nil {
		return invalid("params", "missing")
	}
	if p.Limit < 0 || p.Limit > 100000 {
		return invalid("limit", "must be between 0 (default) and 100000, got %d", p.Limit)
	}
	return nil
}
