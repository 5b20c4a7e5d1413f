// Command gen_digest_vectors prints digest_vectors.json: reference outputs computed by Go's own
// encoding/json, strings and crypto/sha256 packages for Joinplane's Python port of Sylve's
// guest-identity inventory digest (joinplane.clusters.inventory).
//
// Sylve hashes json.Marshal of a slice of {nodeId, guestType, guestId} structs, so the Python
// encoder must reproduce Go's byte-level choices (HTML escaping, U+2028/U+2029, invalid UTF-8,
// short escapes) and Go's TrimSpace/ToLower rules. Nothing here is run by the test suite; the
// committed JSON is the contract and this file is its documented origin.
//
// Regenerate with an encoder that behaves like Go 1.25's, which Sylve's go.mod names (see main):
//
//	GOEXPERIMENT=nojsonv2 go run gen_digest_vectors.go > digest_vectors.json
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"unicode/utf8"
)

// identity mirrors the anonymous struct Sylve marshals for the digest: same field order, same
// tags, and uint for the guest ID because Sylve's GuestIdentityInventoryEntry.GuestID is uint.
type identity struct {
	NodeID    string `json:"nodeId"`
	GuestType string `json:"guestType"`
	GuestID   uint   `json:"guestId"`
}

// inventoryEntry mirrors Sylve's GuestIdentityInventoryEntry, whose field order is the wire order.
type inventoryEntry struct {
	NodeID    string `json:"nodeId"`
	GuestType string `json:"guestType"`
	GuestID   uint   `json:"guestId"`
	RecordID  uint   `json:"recordId"`
	Name      string `json:"name"`
}

// vectorIdentity is identity plus nodeIdHex, which carries the raw bytes whenever they are not
// valid UTF-8 (JSON cannot hold them, so the nodeId field alone would lose them).
type vectorIdentity struct {
	NodeID    string `json:"nodeId"`
	NodeIDHex string `json:"nodeIdHex,omitempty"`
	GuestType string `json:"guestType"`
	GuestID   uint   `json:"guestId"`
}

type digestVector struct {
	Name    string           `json:"name"`
	Origin  string           `json:"origin"`
	Entries []vectorIdentity `json:"entries"`
	JSON    string           `json:"json"`
	SHA256  string           `json:"sha256"`
}

type canonicalVector struct {
	Name          string           `json:"name"`
	Origin        string           `json:"origin"`
	Entries       []inventoryEntry `json:"entries"`
	Canonical     []inventoryEntry `json:"canonical"`
	CanonicalJSON string           `json:"canonicalJson"`
	JSON          string           `json:"json"`
	SHA256        string           `json:"sha256"`
}

type vectorFile struct {
	Generator        string            `json:"generator"`
	GoVersion        string            `json:"goVersion"`
	DigestVectors    []digestVector    `json:"digestVectors"`
	CanonicalVectors []canonicalVector `json:"canonicalVectors"`
}

func mustMarshal(value any) []byte {
	raw, err := json.Marshal(value)
	if err != nil {
		panic(err)
	}
	return raw
}

func hashIdentities(identities []identity) (string, string) {
	raw := mustMarshal(identities)
	sum := sha256.Sum256(raw)
	return string(raw), hex.EncodeToString(sum[:])
}

func digestCase(name, origin string, identities ...identity) digestVector {
	if identities == nil {
		// Sylve allocates the slice with make(..., len(entries)), so an empty inventory is
		// marshalled as [] and never as null.
		identities = make([]identity, 0)
	}
	raw, sum := hashIdentities(identities)
	entries := make([]vectorIdentity, len(identities))
	for i, id := range identities {
		entries[i] = vectorIdentity{NodeID: id.NodeID, GuestType: id.GuestType, GuestID: id.GuestID}
		if !utf8.ValidString(id.NodeID) {
			entries[i].NodeIDHex = hex.EncodeToString([]byte(id.NodeID))
		}
	}
	return digestVector{Name: name, Origin: origin, Entries: entries, JSON: raw, SHA256: sum}
}

// canonicalize applies the normalisation and ordering Sylve documents for its inventory report:
// TrimSpace on node ID and name, ToLower(TrimSpace) on guest type, then a stable sort by guest ID,
// node ID, guest type, record ID and name using Go's byte-wise string comparison.
func canonicalize(entries []inventoryEntry) []inventoryEntry {
	out := make([]inventoryEntry, len(entries))
	for i, e := range entries {
		e.NodeID = strings.TrimSpace(e.NodeID)
		e.GuestType = strings.ToLower(strings.TrimSpace(e.GuestType))
		e.Name = strings.TrimSpace(e.Name)
		out[i] = e
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.GuestID != b.GuestID {
			return a.GuestID < b.GuestID
		}
		if a.NodeID != b.NodeID {
			return a.NodeID < b.NodeID
		}
		if a.GuestType != b.GuestType {
			return a.GuestType < b.GuestType
		}
		if a.RecordID != b.RecordID {
			return a.RecordID < b.RecordID
		}
		return a.Name < b.Name
	})
	return out
}

func canonicalCase(name, origin string, entries ...inventoryEntry) canonicalVector {
	canonical := canonicalize(entries)
	identities := make([]identity, len(canonical))
	for i, e := range canonical {
		identities[i] = identity{NodeID: e.NodeID, GuestType: e.GuestType, GuestID: e.GuestID}
	}
	raw, sum := hashIdentities(identities)
	return canonicalVector{
		Name:          name,
		Origin:        origin,
		Entries:       entries,
		Canonical:     canonical,
		CanonicalJSON: string(mustMarshal(canonical)),
		JSON:          raw,
		SHA256:        sum,
	}
}

func vm(node string, id uint) identity { return identity{NodeID: node, GuestType: "vm", GuestID: id} }
func jail(node string, id uint) identity {
	return identity{NodeID: node, GuestType: "jail", GuestID: id}
}

func digestVectors() []digestVector {
	return []digestVector{
		digestCase("empty",
			"An empty inventory hashes the two bytes [] because Sylve marshals a non-nil empty slice."),
		digestCase("one-vm",
			"The smallest real inventory fixes the key order nodeId, guestType, guestId and the bare integer.",
			vm("node-a", 100)),
		digestCase("one-jail",
			"A jail differs from a vm with the same ID only in guestType, so the two digests must differ.",
			jail("node-a", 100)),
		digestCase("several-sorted",
			"Several entries in canonical order (guestId, nodeId, guestType) are hashed as one compact array.",
			jail("node-a", 7), vm("node-b", 7), vm("node-a", 101), jail("node-c", 250), vm("node-a", 9998)),
		digestCase("non-ascii-latin",
			"Go writes non-ASCII letters such as œ and ü as raw UTF-8 bytes, never as \\u escapes.",
			vm("nœud-ü", 12)),
		digestCase("cjk",
			"Three-byte CJK characters are also written raw, so the hash covers their UTF-8 bytes.",
			jail("節点-東京", 13)),
		digestCase("emoji",
			"A four-byte emoji is written raw; an encoder emitting a UTF-16 surrogate pair would differ.",
			vm("node-🚀-🦀", 14)),
		digestCase("html-characters",
			"json.Marshal escapes <, > and & as \\u003c, \\u003e and \\u0026 (HTML-safe output is its default).",
			vm("a<b>&c", 15)),
		digestCase("line-and-paragraph-separators",
			"Go escapes U+2028 and U+2029 as \\u2028 and \\u2029 for JavaScript safety although JSON allows them raw.",
			vm("line\u2028para\u2029end", 16)),
		digestCase("quotes-and-backslash",
			"A double quote and a backslash get the two-character escapes \\\" and \\\\.",
			vm(`say "hi" \ path\`, 17)),
		digestCase("control-characters",
			"Go 1.22+ writes \\b \\f \\n \\r \\t short escapes and every other byte below 0x20 as lowercase \\u00XX, but leaves DEL raw.",
			vm("c\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7fz", 18)),
		digestCase("largest-valid-guest-id",
			"Guest ID 9999 is the largest Sylve accepts and is written as a plain decimal integer.",
			jail("node-a", 9999)),
		digestCase("out-of-range-guest-ids",
			"Invalid IDs stay in the digest (0, 10000 and the uint64 maximum), so integers never switch to exponent form.",
			vm("node-a", 0), vm("node-a", 10000), vm("node-a", 18446744073709551615)),
		digestCase("non-canonical-guest-type",
			"The digest hashes whatever guestType survived normalisation, including types Sylve rejects as conflicts.",
			identity{NodeID: "node-a", GuestType: "container", GuestID: 19}),
		digestCase("valid-replacement-character",
			"A genuine U+FFFD in the input is valid UTF-8 and is written raw, unlike the escape used for bad bytes.",
			vm("node-\ufffd", 20)),
		digestCase("invalid-utf8",
			"Each byte outside valid UTF-8 (stray 0xff, truncated sequence, encoded surrogate) becomes the escape \\ufffd in Go 1.25 (raw U+FFFD under jsonv2).",
			vm("bad\xff-\xe2\x82-\xed\xa0\x80-end", 21)),
		digestCase("non-breaking-and-odd-spaces",
			"NO-BREAK SPACE, IDEOGRAPHIC SPACE and NEL inside a value are ordinary characters to the encoder and stay raw.",
			vm("a\u00a0b\u3000c\u0085d", 22)),
	}
}

func canonicalVectors() []canonicalVector {
	return []canonicalVector{
		canonicalCase("trim-lowercase-and-sort",
			"Sylve's own insertion-order test data: padding is trimmed, guest types lowercased, entries sorted by guestId then nodeId.",
			inventoryEntry{NodeID: " node-b ", GuestType: " JAIL ", GuestID: 20, RecordID: 4, Name: " jail-20 "},
			inventoryEntry{NodeID: "node-a", GuestType: "vm", GuestID: 10, RecordID: 2, Name: "vm-10"},
			inventoryEntry{NodeID: "node-c", GuestType: "VM", GuestID: 20, RecordID: 1, Name: "vm-20"},
		),
		canonicalCase("go-whitespace-set",
			"strings.TrimSpace strips Unicode White_Space (NBSP, U+3000, NEL, U+2028) but not U+001F or U+200B, unlike Python's str.strip.",
			inventoryEntry{NodeID: "\u3000node-a\u00a0", GuestType: "\u0085vm\u2028", GuestID: 30, RecordID: 1, Name: "\t n \n"},
			inventoryEntry{NodeID: "\x1fnode-b\x1f", GuestType: "jail", GuestID: 31, RecordID: 2, Name: "\x1cname\x1d"},
			inventoryEntry{NodeID: "\u200bnode-c", GuestType: "vm\u200b", GuestID: 32, RecordID: 3, Name: "\v\f"},
		),
		canonicalCase("go-simple-lowercase",
			"strings.ToLower maps rune by rune: İ becomes plain i (so JAİL is a jail) and a final Σ becomes σ, not the final-sigma ς.",
			inventoryEntry{NodeID: "node-a", GuestType: "JA\u0130L", GuestID: 40, RecordID: 1, Name: "dotted"},
			inventoryEntry{NodeID: "node-a", GuestType: "ΣΑΣ", GuestID: 41, RecordID: 2, Name: "sigma"},
			inventoryEntry{NodeID: "node-a", GuestType: "\u212aVM", GuestID: 42, RecordID: 3, Name: "kelvin"},
		),
		canonicalCase("byte-order-ties",
			"Ties on guestId fall back to nodeId, guestType, recordId and name, compared as UTF-8 bytes (uppercase before lowercase, ASCII before é).",
			inventoryEntry{NodeID: "node-é", GuestType: "vm", GuestID: 50, RecordID: 1, Name: "x"},
			inventoryEntry{NodeID: "node-e", GuestType: "vm", GuestID: 50, RecordID: 9, Name: "b"},
			inventoryEntry{NodeID: "node-e", GuestType: "vm", GuestID: 50, RecordID: 9, Name: "B"},
			inventoryEntry{NodeID: "node-e", GuestType: "jail", GuestID: 50, RecordID: 10, Name: "a"},
			inventoryEntry{NodeID: "Node-e", GuestType: "vm", GuestID: 50, RecordID: 2, Name: "a"},
		),
	}
}

func main() {
	// Sylve's go.mod says Go 1.25, whose encoding/json writes \b and \f as short escapes (Go 1.21
	// and older wrote \u0008 and \u000c) and each invalid UTF-8 byte as the six-character escape
	// \ufffd (toolchains that build encoding/json on the jsonv2 experiment write a raw U+FFFD
	// instead). Refuse to print vectors from an encoder that differs from Go 1.25's.
	if probe := string(mustMarshal("\b\f\xff")); probe != `"\b\f\ufffd"` {
		fmt.Fprintf(os.Stderr,
			"%s encodes \"\\b\\f\\xff\" as %s, not as Go 1.25 does; use Go >= 1.22, with GOEXPERIMENT=nojsonv2 where jsonv2 is the default\n",
			runtime.Version(), probe)
		os.Exit(1)
	}
	file := vectorFile{
		Generator:        "tests/clusters/vectors/gen_digest_vectors.go",
		GoVersion:        runtime.Version(),
		DigestVectors:    digestVectors(),
		CanonicalVectors: canonicalVectors(),
	}
	encoder := json.NewEncoder(os.Stdout)
	encoder.SetEscapeHTML(false)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(file); err != nil {
		panic(err)
	}
}
