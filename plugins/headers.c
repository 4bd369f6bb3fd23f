int x_headers;
