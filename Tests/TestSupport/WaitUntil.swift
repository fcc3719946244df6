import Foundation
import Testing

/// Checks `condition` every `intervalMillis` until it holds (true) or `timeoutSeconds` have passed
/// (false). The deadline only bounds a failing test, so it is generous: a passing test goes on as
/// soon as the condition holds, whatever the machine's speed. The pause between looks is not what
/// a test measures or waits for.
public func waitUntil(
    timeoutSeconds: Double = 120, intervalMillis: Int = 5, _ condition: () throws -> Bool
) rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int64(timeoutSeconds * 1000))
    while try !condition() {
        if ContinuousClock.now > deadline { return false }
        usleep(useconds_t(intervalMillis * 1000))
    }
    return true
}

/// `waitUntil` for a test that cannot go on without the condition: a timeout records a failure
/// that says what was awaited, and throws `WaitTimedOut`.
public func waitUntil(
    _ what: String, timeoutSeconds: Double = 120, intervalMillis: Int = 5,
    sourceLocation: SourceLocation = #_sourceLocation, _ condition: () throws -> Bool
) throws {
    guard try waitUntil(timeoutSeconds: timeoutSeconds, intervalMillis: intervalMillis, condition) else {
        Issue.record("waited \(Int(timeoutSeconds)) s for: \(what)", sourceLocation: sourceLocation)
        throw WaitTimedOut(what: what)
    }
}

/// What the awaiting form of `waitUntil` throws once its deadline has passed.
public struct WaitTimedOut: Error, CustomStringConvertible {
    public var what: String
    public init(what: String) { self.what = what }
    public var description: String { "timed out waiting for \(what)" }
}
