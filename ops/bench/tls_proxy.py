"""TLS in front of a plain-HTTP server, for measuring a client over https:// on loopback.

    python3 ops/bench/tls_proxy.py CERT KEY PORT_FILE TARGET_PORT

Listens on a free port of 127.0.0.1 with CERT/KEY (PEM), writes the port to PORT_FILE, and
forwards each connection's bytes both ways to 127.0.0.1:TARGET_PORT until either side closes.
"""
import asyncio
import ssl
import sys


async def pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()


async def main():
    cert, key, port_file, target = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    async def handle(reader, writer):
        target_reader, target_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(
            pipe(reader, target_writer), pipe(target_reader, writer), return_exceptions=True)

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)
    with open(port_file, "w") as file:
        file.write(str(server.sockets[0].getsockname()[1]))
    await server.serve_forever()


asyncio.run(main())
