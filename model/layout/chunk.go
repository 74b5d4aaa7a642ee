package layout

// Chunk returns the piece j of n elements split m ways as torch.chunk and
// DTensor split uneven dims: each piece is ceil(n/m) long, the last
// non-empty one shorter, and pieces past the end empty. For example 10 over
// 4 gives sizes 3, 3, 3, 1 and 2 over 4 gives 1, 1, 0, 0.
func Chunk(n int64, m, j int) (start, size int64) {
	if n <= 0 || m <= 0 {
		return 0, 0
	}
	c := (n + int64(m) - 1) / int64(m)
	start = min(int64(j)*c, n)
	end := min(start+c, n)
	return start, end - start
}
