{-# LANGUAGE BangPatterns #-}
-- killblocked: kill n threads blocked on MVars, each `frames` frames deep
-- with a `finally` handler in every frame, and wait until every handler
-- has run.  ns_per_thread = that time / n; floor_ns = throwIO ThreadKilled
-- caught through the same frames, in the same run; ratio = the quotient.
-- Haskell twin of nofib_like/killblocked.cpp.
module Main (main) where

import Control.Concurrent
import Control.Monad (when)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

import Unwind (floorNs, killBlocked)

body :: Int -> Int -> IO (Double, Double, Bool)
body n frames = do
  (ns, ok) <- killBlocked n frames (const (newEmptyMVar >>= takeMVar :: IO ()))
  fl <- floorNs frames n
  return (ns, fl, ok)

main :: IO ()
main = do
  args <- getArgs
  let n = case args of (a : _) -> read a; [] -> 100000
      frames = case args of (_ : f : _) -> read f; _ -> 5
  caps <- getNumCapabilities
  r <- newEmptyMVar
  _ <- forkIO (body n frames >>= putMVar r)
  (ns, fl, ok) <- takeMVar r
  printf "capstan-bench name=killblocked impl=ghc caps=%d n=%d ns_per_thread=%.2f floor_ns=%.2f ratio=%.2f frames=%d check=%s\n"
    caps n ns fl (ns / fl) frames (if ok then "ok" else "FAIL")
  when (not ok) exitFailure
