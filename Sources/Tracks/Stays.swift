/// How a history is cut into stays and moves (docs/panel.md, "The day as stays and trips").
public struct StayRules: Sendable, Equatable {
    /// How far from a stay's centre its fixes may lie, beyond each fix's own accuracy.
    public var stayRadiusMeters: Double
    /// A place counts as a stay from this long on; a shorter halt is part of the move around it.
    public var staySecondsMin: Int64
    /// Fixes less sure than this say nothing about staying or moving (a cell tower's 3 km circle in
    /// the middle of an evening at home): they are left out of the summary.
    public var coarseAccuracyMetersMax: Double
    /// Consecutive fixes further apart in time than this leave a gap: inside a stay the device stayed
    /// (a phone asleep on a desk reports rarely); between two places the path is unknown.
    public var gapSecondsMin: Int64

    public init(
        stayRadiusMeters: Double = 100, staySecondsMin: Int64 = 300, coarseAccuracyMetersMax: Double = 1_000,
        gapSecondsMin: Int64 = 1_800
    ) {
        self.stayRadiusMeters = stayRadiusMeters
        self.staySecondsMin = staySecondsMin
        self.coarseAccuracyMetersMax = coarseAccuracyMetersMax
        self.gapSecondsMin = gapSecondsMin
    }
}

/// A place where the device stayed.
public struct Stay: Sendable, Equatable {
    /// The centre: the fixes' mean, each weighted by the inverse square of its accuracy.
    public var latitude: Double
    public var longitude: Double
    /// The farthest from the centre of the stay's fixes that are surer than the stay radius (at
    /// least the best fix's accuracy): the circle to draw.
    public var radiusMeters: Double
    public var startMicros: Int64
    public var endMicros: Int64
    /// The fixes the stay is made of (outliers and coarse fixes inside its time are not counted).
    public var fixCount: Int
    /// The indices in the input of its first and last fix.
    public var firstIndex: Int
    public var lastIndex: Int
}

/// The way between two stays (or before the first, or after the last).
public struct Move: Sendable, Equatable {
    public var startMicros: Int64
    public var endMicros: Int64
    /// Along the fixes, from the last fix of the stay before to the first of the stay after.
    public var distanceMeters: Double
    /// The fixes taken on the way (the stays' own not included).
    public var fixCount: Int
    /// Somewhere on the way no fix came for `gapSecondsMin` or longer: the path there is unknown.
    public var hasGap: Bool
}

public enum DaySegment: Sendable, Equatable {
    case stay(Stay)
    case move(Move)
}

/// Cuts a history into stays and the moves between them. A pure function: `points` in the order of
/// their `recordedAtMicros` (the read API's order), the same points always give the same segments.
///
/// Fixes whose clock is suspect, whose accuracy is unknown or coarser than the rules allow are left
/// out. A single fix that leaves a place and is followed by one back inside it is an outlier (a GPS
/// jump), not a trip: leaving takes two fixes in a row outside.
public func summarizeStays(_ points: [TrackPoint], rules: StayRules = StayRules()) -> [DaySegment] {
    let runs = placeRuns(points, rules: rules)
    var segments: [DaySegment] = []
    // Fixes between two stays: the move's, in order.
    var way: [Int] = []
    var previousStayEnd: (index: Int, micros: Int64)?

    func closeMove(until next: (index: Int, micros: Int64)?) {
        var path: [Int] = []
        if let previousStayEnd { path.append(previousStayEnd.index) }
        path += way
        if let next { path.append(next.index) }
        defer { way = [] }
        // Two stays back to back are different places (mergedStays joined the others): a move of
        // no fixes between them. Before the first stay or after the last, only fixes make a move.
        guard !way.isEmpty || (previousStayEnd != nil && next != nil) else { return }
        var distance = 0.0
        var gap = false
        for (a, b) in zip(path, path.dropFirst()) {
            distance += Geodesy.distanceMeters(points[a], points[b])
            if points[b].recordedAtMicros - points[a].recordedAtMicros >= rules.gapSecondsMin * 1_000_000 {
                gap = true
            }
        }
        segments.append(
            .move(
                Move(
                    startMicros: previousStayEnd?.micros ?? points[path[0]].recordedAtMicros,
                    endMicros: next?.micros ?? points[path[path.count - 1]].recordedAtMicros,
                    distanceMeters: distance, fixCount: way.count, hasGap: gap)))
    }

    for run in mergedStays(runs, points: points, rules: rules) {
        guard run.isStay else {
            way += run.members
            continue
        }
        let first = run.members[0]
        let last = run.members[run.members.count - 1]
        closeMove(until: (first, points[first].recordedAtMicros))
        segments.append(.stay(run.stay(points, rules: rules)))
        previousStayEnd = (last, points[last].recordedAtMicros)
    }
    closeMove(until: nil)
    return segments
}

/// Consecutive fixes at one place (a cluster), before deciding whether it lasted long enough.
struct PlaceRun {
    var members: [Int] = []
    var latitudeSum = 0.0
    var longitudeSum = 0.0
    var weightSum = 0.0
    var isStay = false

    var latitude: Double { latitudeSum / weightSum }
    var longitude: Double { longitudeSum / weightSum }

    mutating func add(_ index: Int, _ point: TrackPoint) {
        // Every usable point has a known accuracy; at least a metre, so one fix cannot weigh infinitely.
        let accuracy = max(point.knownAccuracy ?? 1, 1)
        let weight = 1 / (accuracy * accuracy)
        members.append(index)
        var longitude = point.longitude
        // Sums stay continuous across the antimeridian: a point is taken on the side of the mean so far.
        if weightSum > 0 {
            let mean = longitudeSum / weightSum
            if longitude - mean > 180 { longitude -= 360 }
            if longitude - mean < -180 { longitude += 360 }
        }
        latitudeSum += point.latitude * weight
        longitudeSum += longitude * weight
        weightSum += weight
    }

    func distance(to point: TrackPoint) -> Double {
        Geodesy.distanceMeters(latitude, longitude, point.latitude, point.longitude)
    }

    /// How far the run's last quarter lies from its first: a slow walk with vague fixes stays
    /// within its moving centre's circle for minutes, but its ends are far apart; a stay's are not.
    func drift(_ points: [TrackPoint]) -> Double {
        let quarter = (members.count + 3) / 4
        var head = PlaceRun()
        var tail = PlaceRun()
        for index in members.prefix(quarter) { head.add(index, points[index]) }
        for index in members.suffix(quarter) { tail.add(index, points[index]) }
        return Geodesy.distanceMeters(head.latitude, head.longitude, tail.latitude, tail.longitude)
    }

    func duration(_ points: [TrackPoint]) -> Int64 {
        points[members[members.count - 1]].recordedAtMicros - points[members[0]].recordedAtMicros
    }

    func stay(_ points: [TrackPoint], rules: StayRules) -> Stay {
        var radius = members.compactMap { points[$0].knownAccuracy }.min() ?? 0
        for index in members where (points[index].knownAccuracy ?? .infinity) <= rules.stayRadiusMeters {
            radius = max(radius, distance(to: points[index]))
        }
        var centreLongitude = longitude
        if centreLongitude > 180 { centreLongitude -= 360 }
        if centreLongitude < -180 { centreLongitude += 360 }
        return Stay(
            latitude: latitude, longitude: centreLongitude, radiusMeters: radius,
            startMicros: points[members[0]].recordedAtMicros,
            endMicros: points[members[members.count - 1]].recordedAtMicros, fixCount: members.count,
            firstIndex: members[0], lastIndex: members[members.count - 1])
    }
}

/// The usable fixes grouped into runs at one place each, outliers dropped.
func placeRuns(_ points: [TrackPoint], rules: StayRules) -> [PlaceRun] {
    let usable = points.indices.filter { index in
        let point = points[index]
        guard !point.clockSuspect, let accuracy = point.knownAccuracy else { return false }
        return accuracy <= rules.coarseAccuracyMetersMax
    }
    var runs: [PlaceRun] = []
    var current = PlaceRun()
    // A fix outside the current run, waiting for the next to say whether the device left.
    var outside: Int?

    func belongs(_ index: Int, to run: PlaceRun) -> Bool {
        let point = points[index]
        return run.distance(to: point) <= rules.stayRadiusMeters + (point.knownAccuracy ?? 0)
    }

    for index in usable {
        if current.members.isEmpty {
            current.add(index, points[index])
            continue
        }
        if belongs(index, to: current) {
            // Back inside after a single fix away: that fix was an outlier.
            outside = nil
            current.add(index, points[index])
            continue
        }
        guard let away = outside else {
            outside = index
            continue
        }
        // Two fixes in a row outside: the device left. The first of them starts the next run.
        runs.append(current)
        current = PlaceRun()
        current.add(away, points[away])
        outside = nil
        if belongs(index, to: current) {
            current.add(index, points[index])
        } else {
            outside = index
        }
    }
    if !current.members.isEmpty { runs.append(current) }
    if let away = outside {
        // The last fix left and nothing followed to say otherwise: it is where the device went.
        var last = PlaceRun()
        last.add(away, points[away])
        runs.append(last)
    }
    for index in runs.indices {
        let run = runs[index]
        runs[index].isStay =
            run.members.count >= 2 && run.duration(points) >= rules.staySecondsMin * 1_000_000
            && run.drift(points) <= rules.stayRadiusMeters
    }
    return runs
}

/// Runs with two stays at one place next to each other joined into one stay (the device left for
/// too short a time to be a stay elsewhere and came back: a walk round the block is a move; two
/// fixes away and back within the stay's circle are not).
func mergedStays(_ runs: [PlaceRun], points: [TrackPoint], rules: StayRules) -> [PlaceRun] {
    var merged: [PlaceRun] = []
    for run in runs {
        if run.isStay, var previous = merged.last, previous.isStay,
            previous.distance(to: points[run.members[0]]) <= rules.stayRadiusMeters
                + (points[run.members[0]].knownAccuracy ?? 0)
        {
            for index in run.members { previous.add(index, points[index]) }
            merged[merged.count - 1] = previous
        } else {
            merged.append(run)
        }
    }
    return merged
}
