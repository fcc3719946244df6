import Projector
import Testing

/// When the idle projector analyzes its tables (`Projector.analyzeIsDue`): soon after a catch-up,
/// and under steady traffic only once a tenth of what it had folded is new.
struct AnalyzeRuleTests {
    @Test func theFirstAnalyzeComesAfterTheMinimum() {
        #expect(!Projector.analyzeIsDue(folded: 4_999, foldedAtLast: 0, minimum: 5_000))
        #expect(Projector.analyzeIsDue(folded: 5_000, foldedAtLast: 0, minimum: 5_000))
        // A catch-up of a seeded history: analyzed as soon as the projector is idle.
        #expect(Projector.analyzeIsDue(folded: 260_000, foldedAtLast: 0, minimum: 5_000))
    }

    @Test func steadyTrafficIsAnalyzedAgainOnceATenthIsNew() {
        #expect(Projector.analyzeIsDue(folded: 10_000, foldedAtLast: 5_000, minimum: 5_000))
        #expect(!Projector.analyzeIsDue(folded: 1_005_000, foldedAtLast: 1_000_000, minimum: 5_000))
        #expect(!Projector.analyzeIsDue(folded: 1_099_999, foldedAtLast: 1_000_000, minimum: 5_000))
        #expect(Projector.analyzeIsDue(folded: 1_100_000, foldedAtLast: 1_000_000, minimum: 5_000))
    }

    @Test func nothingFoldedSinceIsNeverDue() {
        #expect(!Projector.analyzeIsDue(folded: 7_000, foldedAtLast: 7_000, minimum: 0))
    }
}
