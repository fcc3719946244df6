import FindMyClient
import Testing

/// Header values read as HTTP's comma-separated token lists, whatever their case and spacing.
@Suite struct ClientResponseTests {
    @Test func headerTokensAreTrimmedLowercasedAndInOrder() {
        let response = ClientResponse(
            status: 200,
            headers: [
                ClientHeader("connection", "Keep-Alive,  Close"),
                ClientHeader("Transfer-Encoding", "gzip , Chunked"),
            ])
        #expect(response.headerTokens("Connection") == ["keep-alive", "close"])
        #expect(response.headerTokens("transfer-encoding").last == "chunked")
        #expect(response.headerTokens("Content-Length") == [])
        // A token is a whole item: "closed" is not "close".
        #expect(
            !ClientResponse(status: 200, headers: [ClientHeader("Connection", "closed")])
                .headerTokens("Connection").contains("close"))
    }
}
