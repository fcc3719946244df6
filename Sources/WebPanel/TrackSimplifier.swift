#if canImport(Glibc)
    import Glibc
#endif

/// Thins a long track for drawing: Douglas–Peucker on a local metric projection, with a tolerance
/// tied to the track's extent (about one pixel of a 1,000-pixel view of the whole track), and
/// without ever dropping the first or last fix of a stop (a run of fixes within `stopRadiusMeters`
/// of its first one lasting `stopSecondsMin` or more): where a device stayed is what people look for.
struct TrackSimplifier {
    /// Tracks up to this many fixes are drawn whole.
    var fixesDrawnWholeMax = 500
    /// The tolerance is the extent's diagonal divided by this.
    var extentPixels = 1_000.0
    var stopRadiusMeters = 50.0
    var stopSecondsMin: Int64 = 300

    struct Point {
        var latitude: Double
        var longitude: Double
        var recordedAtMicros: Int64
    }

    /// The indices of `points` to keep, ascending; all of them for a short track.
    func keep(_ points: [Point]) -> [Int] {
        guard points.count > fixesDrawnWholeMax else { return Array(points.indices) }
        let projected = project(points)
        var kept = [Bool](repeating: false, count: points.count)
        kept[0] = true
        kept[points.count - 1] = true
        for index in stopEnds(points) { kept[index] = true }
        let tolerance = max(diagonal(projected) / extentPixels, 1)
        // Iterative Douglas–Peucker between consecutive already-kept points (stops split the track).
        var anchors = kept.indices.filter { kept[$0] }
        var stack: [(Int, Int)] = zip(anchors, anchors.dropFirst()).map { ($0, $1) }
        while let (first, last) = stack.popLast() {
            guard last - first > 1 else { continue }
            var farthest = first
            var farthestDistance = 0.0
            for index in (first + 1)..<last {
                let distance = segmentDistance(projected[index], projected[first], projected[last])
                if distance > farthestDistance {
                    farthestDistance = distance
                    farthest = index
                }
            }
            if farthestDistance > tolerance {
                kept[farthest] = true
                stack.append((first, farthest))
                stack.append((farthest, last))
            }
        }
        anchors = kept.indices.filter { kept[$0] }
        return anchors
    }

    /// The first and last index of every stop.
    func stopEnds(_ points: [Point]) -> [Int] {
        var ends: [Int] = []
        var start = 0
        while start < points.count {
            var end = start
            while end + 1 < points.count
                && distanceMeters(points[start], points[end + 1]) <= stopRadiusMeters
            {
                end += 1
            }
            if end > start
                && points[end].recordedAtMicros - points[start].recordedAtMicros >= stopSecondsMin * 1_000_000
            {
                ends.append(start)
                ends.append(end)
            }
            start = end + 1
        }
        return ends
    }

    static let earthRadiusMeters = 6_371_000.0

    func project(_ points: [Point]) -> [(x: Double, y: Double)] {
        let latitude0 = points[0].latitude * .pi / 180
        return points.map {
            (
                x: $0.longitude * .pi / 180 * cos(latitude0) * Self.earthRadiusMeters,
                y: $0.latitude * .pi / 180 * Self.earthRadiusMeters
            )
        }
    }

    func distanceMeters(_ a: Point, _ b: Point) -> Double {
        let latitude = (a.latitude + b.latitude) / 2 * .pi / 180
        let dx = (b.longitude - a.longitude) * .pi / 180 * cos(latitude) * Self.earthRadiusMeters
        let dy = (b.latitude - a.latitude) * .pi / 180 * Self.earthRadiusMeters
        return (dx * dx + dy * dy).squareRoot()
    }

    func diagonal(_ projected: [(x: Double, y: Double)]) -> Double {
        let xs = projected.map(\.x)
        let ys = projected.map(\.y)
        let width = (xs.max() ?? 0) - (xs.min() ?? 0)
        let height = (ys.max() ?? 0) - (ys.min() ?? 0)
        return (width * width + height * height).squareRoot()
    }

    func segmentDistance(
        _ p: (x: Double, y: Double), _ a: (x: Double, y: Double), _ b: (x: Double, y: Double)
    )
        -> Double
    {
        let dx = b.x - a.x
        let dy = b.y - a.y
        let lengthSquared = dx * dx + dy * dy
        var t = 0.0
        if lengthSquared > 0 { t = max(0, min(1, ((p.x - a.x) * dx + (p.y - a.y) * dy) / lengthSquared)) }
        let cx = a.x + t * dx - p.x
        let cy = a.y + t * dy - p.y
        return (cx * cx + cy * cy).squareRoot()
    }
}
