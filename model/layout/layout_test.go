package layout

import (
	"fmt"
	"strings"
	"testing"
)

func TestChunk(t *testing.T) {
	for _, tc := range []struct {
		n     int64
		m     int
		sizes []int64
	}{
		{10, 4, []int64{3, 3, 3, 1}},
		{2, 4, []int64{1, 1, 0, 0}},
		{5, 4, []int64{2, 2, 1, 0}},
		{8, 4, []int64{2, 2, 2, 2}},
		{1, 3, []int64{1, 0, 0}},
		{7, 1, []int64{7}},
		{13, 5, []int64{3, 3, 3, 3, 1}},
		{9, 6, []int64{2, 2, 2, 2, 1, 0}},
	} {
		t.Run(fmt.Sprintf("%d/%d", tc.n, tc.m), func(t *testing.T) {
			next := int64(0)
			for j, want := range tc.sizes {
				s, n := Chunk(tc.n, tc.m, j)
				if n != want {
					t.Errorf("piece %d: size %d, want %d", j, n, want)
				}
				if n > 0 && s != next {
					t.Errorf("piece %d: start %d, want %d", j, s, next)
				}
				next = s + n
			}
			if next != tc.n {
				t.Errorf("pieces cover [0, %d), want [0, %d)", next, tc.n)
			}
		})
	}
}

// One dim sharded by two mesh axes: the outer axis splits first, the inner
// splits each outer piece (DTensor's nested order).
func TestNestedShardSameDim(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int64
		mesh   []int
		boxes  [][2]int64 // (start, size) of dim 0 per mesh position, row-major
		places []Placement
	}{
		{"even 2x2 of 8", 8, []int{2, 2}, [][2]int64{{0, 2}, {2, 2}, {4, 2}, {6, 2}}, []Placement{S(0), S(0)}},
		// 10 over 2 -> 5,5; each 5 over 2 -> 3,2.
		{"uneven 2x2 of 10", 10, []int{2, 2}, [][2]int64{{0, 3}, {3, 2}, {5, 3}, {8, 2}}, []Placement{S(0), S(0)}},
		// 10 over 4 -> 3,3,3,1; each over 2 -> (2,1),(2,1),(2,1),(1,0).
		{"uneven 4x2 of 10", 10, []int{4, 2}, [][2]int64{{0, 2}, {2, 1}, {3, 2}, {5, 1}, {6, 2}, {8, 1}, {9, 1}, {10, 0}}, []Placement{S(0), S(0)}},
		// A replicated axis between the two sharding axes changes nothing.
		{"2xRx2 of 8", 8, []int{2, 2, 2}, [][2]int64{{0, 2}, {2, 2}, {0, 2}, {2, 2}, {4, 2}, {6, 2}, {4, 2}, {6, 2}}, []Placement{S(0), R, S(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := 1
			for _, s := range tc.mesh {
				size *= s
			}
			ranks := make([]int, size)
			for i := range ranks {
				ranks[i] = i
			}
			l := Layout{Shape: []int64{tc.n, 3}, DType: BF16, Mesh: Mesh{Shape: tc.mesh, Ranks: ranks}, Placements: tc.places}
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
			for i, want := range tc.boxes {
				b := l.LocalBox(i)
				if b.Size[0] == 0 && want[1] == 0 {
					continue
				}
				if b.Start[0] != want[0] || b.Size[0] != want[1] {
					t.Errorf("position %d: dim 0 = [%d, +%d), want [%d, +%d)", i, b.Start[0], b.Size[0], want[0], want[1])
				}
				if b.Start[1] != 0 || b.Size[1] != 3 {
					t.Errorf("position %d: dim 1 = %v, want whole", i, b)
				}
			}
		})
	}
}

func TestParsePlacement(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Placement
		err  string
	}{
		{"R", R, ""}, {"Replicate()", R, ""}, {"S(0)", S(0), ""}, {" S( 2 ) ", S(2), ""},
		{"Shard(1)", S(1), ""}, {"S(-1)", Placement{}, "non-negative"}, {"S(x)", Placement{}, "non-negative"},
		{"P", Placement{}, "want R or S(dim)"}, {"", Placement{}, "want R or S(dim)"},
	} {
		got, err := ParsePlacement(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParsePlacement(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParsePlacement(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if back, _ := ParsePlacement(got.String()); back != got {
			t.Errorf("round trip of %v gave %v", got, back)
		}
	}
}

func TestParseRanks(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // FormatRanks of the result
		n    int
		err  string
	}{
		{"0-15", "0-15", 16, ""},
		{"16-79,96", "16-79,96", 65, ""},
		{"3, 1, 2", "3,1-2", 3, ""},
		{"5", "5", 1, ""},
		{"7-3", "", 0, "backwards"},
		{"a-3", "", 0, "not a rank"},
		{"", "", 0, "empty"},
		{"-1", "", 0, "not a rank"},
		{"0-99999999", "", 0, "not a rank"},
		{"0-1048575,0-1048575", "", 0, "more than"},
	} {
		got, err := ParseRanks(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseRanks(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != tc.n || FormatRanks(got) != tc.want {
			t.Errorf("ParseRanks(%q) = %v (%s), %v", tc.in, got, FormatRanks(got), err)
		}
	}
}

func TestDTypes(t *testing.T) {
	want := map[string]int64{"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8, "fp8_e4m3": 1, "fp8_e5m2": 1,
		"int8": 1, "uint8": 1, "int32": 4, "int64": 8, "bfloat16": 2, "float8_e4m3fn": 1, "FP32": 4}
	for name, size := range want {
		d, err := ParseDType(name)
		if err != nil || d.Size() != size {
			t.Errorf("ParseDType(%q) = %v (size %d), %v; want size %d", name, d, d.Size(), err, size)
		}
	}
	if _, err := ParseDType("fp4"); err == nil || !strings.Contains(err.Error(), `"fp4"`) {
		t.Errorf("ParseDType(fp4) error %v, want one naming the value", err)
	}
}

func TestValidate(t *testing.T) {
	mesh := Mesh{Shape: []int{2, 2}, Ranks: []int{0, 1, 2, 3}}
	good := Layout{Shape: []int64{4, 4}, DType: BF16, Mesh: mesh, Placements: []Placement{S(0), R}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Layout)
		err  string
	}{
		{"shard dim out of range", func(l *Layout) { l.Placements = []Placement{S(2), R} }, "placements[0] = S(2): shard dim out of range"},
		{"mesh shape vs ranks", func(l *Layout) { l.Mesh = Mesh{Shape: []int{2, 3}, Ranks: []int{0, 1, 2, 3}} }, "has 6 positions but the rank list has 4"},
		{"rank twice", func(l *Layout) { l.Mesh = Mesh{Shape: []int{2, 2}, Ranks: []int{0, 1, 1, 3}} }, "rank 1 appears twice"},
		{"zero size", func(l *Layout) { l.Shape = []int64{4, 0} }, "shape[1] = 0"},
		{"negative size", func(l *Layout) { l.Shape = []int64{-4, 4} }, "shape[0] = -4"},
		{"placement count", func(l *Layout) { l.Placements = []Placement{R} }, "1 placements for a mesh of 2 axes"},
		{"bad dtype", func(l *Layout) { l.DType = Invalid }, "dtype"},
		{"overflow", func(l *Layout) { l.Shape = []int64{1 << 40, 1 << 40} }, "larger than"},
		{"zero mesh axis", func(l *Layout) { l.Mesh = Mesh{Shape: []int{0, 2}, Ranks: nil} }, "mesh shape[0] = 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := good
			l.Mesh = Mesh{Shape: append([]int(nil), mesh.Shape...), Ranks: append([]int(nil), mesh.Ranks...)}
			tc.mod(&l)
			err := l.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

func TestBoxRuns(t *testing.T) {
	full := []int64{16, 2048, 7168}
	for _, tc := range []struct {
		box        Box
		count, run int64
	}{
		{Box{[]int64{0, 256, 0}, []int64{16, 256, 7168}}, 16, 256 * 7168},
		{Box{[]int64{0, 0, 0}, []int64{16, 2048, 7168}}, 1, 16 * 2048 * 7168},
		{Box{[]int64{3, 0, 0}, []int64{1, 256, 7168}}, 1, 256 * 7168},
		{Box{[]int64{0, 0, 0}, []int64{4, 1, 7168}}, 4, 7168},
		{Box{[]int64{0, 0, 8}, []int64{2, 3, 16}}, 6, 16},
	} {
		c, r := tc.box.Runs(full)
		if c != tc.count || r != tc.run {
			t.Errorf("%v.Runs = %d x %d, want %d x %d", tc.box, c, r, tc.count, tc.run)
		}
	}
}

func ExampleLayout_LocalBox() {
	// The paper's generator at rho = 2: mesh [2, 8] (DP, TP), placements [R, S(1)].
	ranks := make([]int, 16)
	for i := range ranks {
		ranks[i] = 72 + i
	}
	l := Layout{
		Shape:      []int64{256, 2048, 7168},
		DType:      BF16,
		Mesh:       Mesh{Shape: []int{2, 8}, Ranks: ranks},
		Placements: []Placement{R, S(1)},
	}
	fmt.Println(l.LocalBox(3))  // DP 0, TP 3
	fmt.Println(l.LocalBox(11)) // DP 1, TP 3: a replica
	// Output:
	// [0:256, 768:1024, 0:7168]
	// [0:256, 768:1024, 0:7168]
}

func TestForEachRun(t *testing.T) {
	// Compare with element-by-element enumeration on random boxes.
	full := []int64{3, 4, 5}
	for a0 := int64(0); a0 < 3; a0++ {
		for s1 := int64(1); s1 <= 4; s1++ {
			for s2 := int64(1); s2 <= 5; s2++ {
				b := Box{Start: []int64{a0, 4 - s1, 5 - s2}, Size: []int64{3 - a0, s1, s2}}
				var got []int64
				b.ForEachRun(full, func(first, n int64) {
					for k := range n {
						got = append(got, first+k)
					}
				})
				var want []int64
				for i := b.Start[0]; i < b.Start[0]+b.Size[0]; i++ {
					for j := b.Start[1]; j < b.Start[1]+b.Size[1]; j++ {
						for k := b.Start[2]; k < b.Start[2]+b.Size[2]; k++ {
							want = append(want, (i*4+j)*5+k)
						}
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%v: runs cover %v, want %v", b, got, want)
				}
			}
		}
	}
}

func ExampleRankRange() {
	ranks := RankRange(72, 16)
	fmt.Println(FormatRanks(ranks), len(ranks))
	// Output: 72-87 16
}

func TestRankIndex(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ranks []int
	}{
		{"empty", nil},
		{"dense", []int{5, 3, 4, 9, 7}},
		{"sparse", []int{1 << 19, 3, 1<<20 - 1, 0}},
		{"huge", []int{1 << 62, 1, 1 << 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := NewRankIndex(tc.ranks)
			for i, r := range tc.ranks {
				if got := x.Pos(r); got != i {
					t.Errorf("Pos(%d) = %d, want %d", r, got, i)
				}
			}
			for _, r := range []int{-1, 2, 6, 1 << 21, 1<<62 + 1} {
				if got := x.Pos(r); got != -1 {
					t.Errorf("Pos(%d) = %d, want -1", r, got)
				}
			}
		})
	}
}

func TestBoxArenaReset(t *testing.T) {
	var a BoxArena
	x := a.Clone(Box{Start: []int64{1, 2}, Size: []int64{3, 4}})
	y := a.New(3)
	if !y.Equal(NewBox(3)) || len(x.Start) != 2 || x.Size[1] != 4 {
		t.Fatalf("New after Clone: %v, %v", x, y)
	}
	a.Reset()
	// The memory of x is handed out again, zeroed.
	z := a.New(2)
	if !z.Equal(NewBox(2)) || &z.Start[0] != &x.Start[0] {
		t.Fatalf("New after Reset: %v, want zeros in x's memory", z)
	}
	z.Size[1] = 7
	if w := a.New(1); w.Start[0] != 0 || w.Size[0] != 0 || z.Size[1] != 7 {
		t.Fatalf("boxes overlap after Reset: %v, %v", z, w)
	}
}
