import HTTP
import Testing

@Test func queryIsPercentDecodedWithPlusAsSpace() {
    let request = HTTPRequest(method: "GET", target: "/p%20q?a=1&b=x+y%21&c&a=2&bad=%zz&d=%C3%A9")
    #expect(request.path == "/p%20q")
    #expect(request.query("a") == "1")
    #expect(request.queryItems.filter { $0.name == "a" }.map(\.value) == ["1", "2"])
    #expect(request.query("b") == "x y!")
    #expect(request.query("c") == "")
    #expect(request.query("bad") == "%zz")
    #expect(request.query("d") == "é")
}

@Test func headerLookupIgnoresCase() {
    var headers = HTTPHeaders([("Content-Type", "a"), ("X-Multi", "1")])
    headers.add("x-multi", "2")
    #expect(headers["content-type"] == "a")
    #expect(headers["CONTENT-TYPE"] == "a")
    #expect(headers["Content-Typf"] == nil)
    #expect(headers.values("X-MULTI") == ["1", "2"])
}

@Test func errorBodyEscapesItsStrings() {
    let response = HTTPResponse.error(status: 400, code: "bad", message: "say \"hi\"\\\n\u{1}é")
    #expect(response.status == 400)
    #expect(response.headers["content-type"] == "application/json")
    #expect(
        String(decoding: response.body, as: UTF8.self)
            == #"{"error": {"code": "bad", "message": "say \"hi\"\\\n\u0001é"}}"#)
}

@Test func routerMatchesParametersAndNamesRoutes() {
    var router = Router()
    router.add("GET", "/devices/{id}") { .text($0.pathParameters["id"] ?? "") }
    router.add("PUT", "/devices/{id}") { _ in .text("put") }
    router.add("GET", "/devices/mine") { _ in .text("literal") }
    let (name, response) = router.respond(to: HTTPRequest(method: "GET", target: "/devices/a%2Fb?x=1"))
    #expect(name == "/devices/{id}")
    #expect(String(decoding: response.body, as: UTF8.self) == "a/b")
    #expect(router.respond(to: HTTPRequest(method: "GET", target: "/devices/")).routeName == "unmatched")
    #expect(router.respond(to: HTTPRequest(method: "GET", target: "/devices/x/y")).response.status == 404)
    let (_, notAllowed) = router.respond(to: HTTPRequest(method: "POST", target: "/devices/7"))
    #expect(notAllowed.status == 405)
    #expect(notAllowed.headers["Allow"] == "GET, PUT")
    #expect(router.routeName(method: "PUT", path: "/devices/7") == "/devices/{id}")
}
