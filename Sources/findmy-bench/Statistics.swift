/// The median of `values`: the middle one once sorted, the upper of the two middles for an even
/// count (always a value that was measured, never an average of two); nil when there are none.
/// Every figure the bench calls a median is this one.
func median<T: Comparable>(_ values: [T]) -> T? {
    guard !values.isEmpty else { return nil }
    return values.sorted()[values.count / 2]
}
