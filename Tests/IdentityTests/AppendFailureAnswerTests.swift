import Core
import Testing

@testable import Identity

/// The 503s a failed append answers, as a caller reads them: Core's `AppendFailure` becomes the
/// same status, code and message the server sent before the append path left Identity.
@Suite struct AppendFailureAnswerTests {
    @Test func aLogThatCannotStoreIsA503NamingTheLogsError() {
        let answer = APIError(AppendFailure.logUnavailable(reason: "No space left on device"))
        #expect(answer.status == 503 && answer.code == .logUnavailable)
        #expect(
            answer.message
                == "the server could not store the request durably (No space left on device); nothing was stored, send it again later"
        )
        #expect(!answer.isRegistryConflict)
    }

    @Test func aConflictBetweenNodesIsA503ThatTheMutationLockDecidesAgain() {
        let answer = APIError(AppendFailure.registryConflict)
        #expect(answer.status == 503 && answer.code == .registryConflict)
        #expect(
            answer.message
                == "other servers took the new id at the same moment, again and again; nothing was stored, send the request again"
        )
        #expect(answer.isRegistryConflict)
    }
}
