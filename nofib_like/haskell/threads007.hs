-- threads007: n threads blocked at exit, a third each on MVars, Chan reads
-- and threadDelay (1 h) (GHC's threads007 shape), each `frames` frames
-- deep with a `finally` handler in every frame.  GHC's exit does not run
-- the handlers of blocked threads, so the twin does what capstan's run()
-- does at exit: it kills every blocked thread and waits until every
-- handler has run.  exit_ns = that time / n; floor_ns = throwIO
-- ThreadKilled caught through the same frames; ratio = the quotient.
-- Haskell twin of nofib_like/shutdown.cpp built as threads007 (shutdown.hs:
-- the same with fd waits instead of Chans; both are Unwind.exitBench).
module Main (main) where

import Control.Concurrent (Chan, newChan, readChan)
import Control.Monad (replicateM)

import Unwind (exitBench)

main :: IO ()
main = exitBench "threads007" 20000 $ do
  chans <- replicateM 16 newChan :: IO [Chan ()]
  return (\i -> readChan (chans !! (i `mod` 16)))
