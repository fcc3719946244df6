import Postgres
import Testing

/// The supervisor's decisions as transcripts: event in, action out, on a clock the test sets.
@Suite struct ClusterSupervisionTests {
    let backOff = ClusterSupervision.BackOff(delayMicrosMin: 1_000, delayMicrosMax: 4_000)

    @Test func aRunningServerIsWatched() {
        let supervision = ClusterSupervision(backOff: backOff)
        #expect(supervision.next(nowMicros: 0) == .watch)
        #expect(supervision.restarts == 0)
        #expect(supervision.lastExit == nil)
    }

    @Test func anEndedServerIsRestartedAfterTheMinimumDelayAndWatchedAgain() {
        var supervision = ClusterSupervision(backOff: backOff)
        supervision.serverEnded("killed by signal 9", nowMicros: 100)
        #expect(supervision.phase == .down(sinceMicros: 100, nextAttemptMicros: 1_100))
        #expect(supervision.next(nowMicros: 100) == .wait(untilMicros: 1_100))
        #expect(supervision.next(nowMicros: 1_100) == .restart)
        supervision.restartBegan(nowMicros: 1_100)
        #expect(supervision.attemptStartedMicros == 1_100)
        supervision.restartSucceeded()
        #expect(supervision.attemptStartedMicros == nil)
        #expect(supervision.next(nowMicros: 1_101) == .watch)
        #expect(supervision.restarts == 1)
        #expect(supervision.lastExit == "killed by signal 9")
    }

    /// A disk that stays full: every attempt fails, the wait doubles up to its maximum, and the
    /// supervisor never gives up; the first success resets the wait.
    @Test func failedStartsBackOffUpToTheMaximumAndNeverGiveUp() {
        var supervision = ClusterSupervision(backOff: backOff)
        supervision.serverEnded("exited with status 1", nowMicros: 0)
        var now: Int64 = 1_000
        var waits: [Int64] = []
        for _ in 0..<6 {
            #expect(supervision.next(nowMicros: now) == .restart)
            supervision.restartBegan(nowMicros: now)
            supervision.restartFailed("No space left on device", nowMicros: now)
            #expect(supervision.attemptStartedMicros == nil)
            guard case .wait(let until) = supervision.next(nowMicros: now) else {
                Issue.record("no wait after a failed start")
                return
            }
            #expect(supervision.next(nowMicros: until - 1) == .wait(untilMicros: until))
            waits.append(until - now)
            now = until
        }
        #expect(waits == [2_000, 4_000, 4_000, 4_000, 4_000, 4_000])
        #expect(supervision.failedAttempts == 6)
        #expect(supervision.lastAttemptError == "No space left on device")
        #expect(supervision.phase == .down(sinceMicros: 0, nextAttemptMicros: now))

        supervision.restartSucceeded()
        #expect(supervision.next(nowMicros: now) == .watch)
        #expect(supervision.failedAttempts == 0)
        #expect(supervision.lastAttemptError == nil)
        supervision.serverEnded("killed by signal 9", nowMicros: now)
        #expect(supervision.next(nowMicros: now) == .wait(untilMicros: now + 1_000))
        now += 1_000
        supervision.restartFailed("again", nowMicros: now)
        #expect(supervision.next(nowMicros: now) == .wait(untilMicros: now + 2_000))
    }

    /// Events that do not fit the phase change nothing: a second report of the same end, a
    /// success or failure reported while it runs.
    @Test func eventsOutOfPhaseAreIgnored() {
        var supervision = ClusterSupervision(backOff: backOff)
        supervision.restartSucceeded()
        supervision.restartFailed("x", nowMicros: 5)
        #expect(supervision == ClusterSupervision(backOff: backOff))
        supervision.serverEnded("first", nowMicros: 10)
        supervision.serverEnded("second", nowMicros: 20)
        #expect(supervision.lastExit == "first")
        #expect(supervision.phase == .down(sinceMicros: 10, nextAttemptMicros: 1_010))
    }
}
