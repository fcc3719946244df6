import HTTP
import Testing

/// The one percent-encoding: the CLI's user paths, the login redirect's `next`, and the server's
/// decoding of paths, queries and forms.
@Test func percentEncodingKeepsOnlyUnreservedCharacters() {
    #expect(percentEncoded("AZaz09-._~") == "AZaz09-._~")
    #expect(percentEncoded("a b/c?d=e&f+g%") == "a%20b%2Fc%3Fd%3De%26f%2Bg%25")
    #expect(percentEncoded("/find-my?selected=1") == "%2Ffind-my%3Fselected%3D1")
    #expect(percentEncoded("zoë") == "zo%C3%AB")
    #expect(percentEncoded("") == "")
}

@Test func percentDecodingKeepsMalformedEscapesAsWritten() {
    #expect(percentDecoded("zo%c3%AB%2f", plusAsSpace: false) == "zoë/")
    #expect(percentDecoded("a+b%2B", plusAsSpace: true) == "a b+")
    #expect(percentDecoded("a+b", plusAsSpace: false) == "a+b")
    #expect(percentDecoded("100%", plusAsSpace: false) == "100%")
    #expect(percentDecoded("%4", plusAsSpace: false) == "%4")
    #expect(percentDecoded("%zz%41", plusAsSpace: false) == "%zzA")
}

@Test func percentEncodingRoundTrips() {
    var generator = SystemRandomNumberGenerator()
    let alphabet = Array("aZ9-._~ +%/?&=#zoë東京🚲\u{0}\u{7f}")
    for _ in 0..<2000 {
        let text = String(
            (0..<Int.random(in: 0...12, using: &generator)).map { _ in alphabet.randomElement()! })
        #expect(percentDecoded(Substring(percentEncoded(text)), plusAsSpace: true) == text)
        #expect(percentDecoded(Substring(percentEncoded(text)), plusAsSpace: false) == text)
    }
}
