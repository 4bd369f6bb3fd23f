int x_cachekey;
