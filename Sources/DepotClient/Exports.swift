// The HTTP/1.1 client lives in DepotTransport, shared with the server's S3 store; an app that
// imports DepotClient sees its types (HTTPTransport, TransportOptions, ClientError) as before.
@_exported import DepotTransport
