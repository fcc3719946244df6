/// The items one element of a file held (a segment's path points, an element's activities and
/// its fix), handed out in order before the next element is read. Its storage is reused, so a
/// reader allocates nothing per element once it has seen its largest one.
struct PendingItems {
    private var items: [ImportItem] = []
    private var nextIndex = 0

    mutating func append(_ item: ImportItem) {
        if nextIndex == items.count && nextIndex > 0 {
            items.removeAll(keepingCapacity: true)
            nextIndex = 0
        }
        items.append(item)
    }

    mutating func next() -> ImportItem? {
        guard nextIndex < items.count else { return nil }
        nextIndex += 1
        return items[nextIndex - 1]
    }
}
