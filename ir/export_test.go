package ir

// SetSpansOnly turns the verifier's box writes off (true) or on, for the
// test that compares the two.
func SetSpansOnly(on bool) { spansOnly = on }
