#if canImport(Glibc)
    import Glibc
#endif

/// Thins a long track for drawing: Douglas–Peucker on a local metric projection, where a fix is
/// needed only when it lies off the thinned line by more than the tolerance **plus its own
/// accuracy** (a fix 40 m off a straight street that is itself ±50 m says nothing the line does
/// not), the tolerance tied to the track's extent (about one pixel of a 1,000-pixel view of the
/// whole track). The first and last fix of every stay (`summarizeStays`) are always kept: where a
/// device stayed, and when it left, is what people look for.
public struct TrackSimplifier: Sendable {
    /// Tracks up to this many fixes are drawn whole.
    public var fixesDrawnWholeMax = 500
    /// The tolerance is the extent's diagonal divided by this.
    public var extentPixels = 1_000.0
    public var stayRules = StayRules()

    public init() {}

    /// The indices of `points` (in time order) to keep, ascending; all of them for a short track.
    public func keep(_ points: [TrackPoint]) -> [Int] {
        guard points.count > fixesDrawnWholeMax else { return Array(points.indices) }
        let projected = project(points)
        var kept = [Bool](repeating: false, count: points.count)
        kept[0] = true
        kept[points.count - 1] = true
        for case .stay(let stay) in summarizeStays(points, rules: stayRules) {
            kept[stay.firstIndex] = true
            kept[stay.lastIndex] = true
        }
        let tolerance = max(diagonal(projected) / extentPixels, 1)
        // Iterative Douglas–Peucker between consecutive already-kept points (stays split the track).
        let anchors = kept.indices.filter { kept[$0] }
        var stack: [(Int, Int)] = zip(anchors, anchors.dropFirst()).map { ($0, $1) }
        while let (first, last) = stack.popLast() {
            guard last - first > 1 else { continue }
            var farthest = first
            var farthestExcess = 0.0
            for index in (first + 1)..<last {
                let off = segmentDistance(projected[index], projected[first], projected[last])
                let excess = off - (points[index].knownAccuracy ?? 0)
                if excess > farthestExcess {
                    farthestExcess = excess
                    farthest = index
                }
            }
            if farthestExcess > tolerance {
                kept[farthest] = true
                stack.append((first, farthest))
                stack.append((farthest, last))
            }
        }
        return kept.indices.filter { kept[$0] }
    }

    func project(_ points: [TrackPoint]) -> [(x: Double, y: Double)] {
        let latitude0 = points[0].latitude * .pi / 180
        let longitude0 = points[0].longitude
        return points.map {
            var longitude = $0.longitude - longitude0
            if longitude > 180 { longitude -= 360 }
            if longitude < -180 { longitude += 360 }
            return (
                x: longitude * .pi / 180 * cos(latitude0) * Geodesy.earthRadiusMeters,
                y: $0.latitude * .pi / 180 * Geodesy.earthRadiusMeters
            )
        }
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
    ) -> Double {
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
