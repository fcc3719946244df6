extension JSONWriter {
    /// The fixes of a batch that were not accepted, `[{"index": n, "reason": "..."}, ...]`: the one
    /// shape of the report answer's `rejected` (Ingest) and of `findmy log dump`'s (CLI). This module
    /// knows no event types, so each caller hands over its rejections' index and reason. Inlinable:
    /// every report answer writes this, and an unspecialised generic resolves its sequence's types at
    /// run time on each call.
    @inlinable
    public mutating func rejectedFixes(_ rejections: some Sequence<(index: UInt32, reason: String)>) {
        beginArray()
        for rejection in rejections {
            beginObject()
            key("index")
            int64(Int64(rejection.index))
            key("reason")
            string(rejection.reason)
            endObject()
        }
        endArray()
    }
}
