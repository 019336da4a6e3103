{-# LANGUAGE OverloadedStrings #-}
-- http_warp: Warp's hello world, the twin of examples/http_hello.cpp for
-- the nofib_like `http` load program (nofib_like/http.py).
--   http_warp PORT +RTS -N2 -RTS
-- Listens on 127.0.0.1:PORT, prints "listening on 127.0.0.1:<port>", and
-- answers every request with "Hello, World!" (keep-alive, as Warp does).
module Main (main) where

import Network.HTTP.Types (status200)
import Network.Wai (responseLBS)
import Network.Wai.Handler.Warp
import System.Environment (getArgs)
import System.IO

main :: IO ()
main = do
  args <- getArgs
  let port = case args of (p : _) -> read p; [] -> 8080
      settings = setHost "127.0.0.1" $ setPort port
               $ setBeforeMainLoop (putStrLn ("listening on 127.0.0.1:" ++ show port) >> hFlush stdout)
               defaultSettings
  runSettings settings $ \_ respond ->
    respond $ responseLBS status200 [("Content-Type", "text/plain")] "Hello, World!"
