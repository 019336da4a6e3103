{-# LANGUAGE BangPatterns #-}
-- killblocked: kill n threads blocked on MVars, each `frames` frames deep
-- with a `finally` handler in every frame, and wait until every handler
-- has run.  ns_per_thread = that time / n; floor_ns = throwIO ThreadKilled
-- caught through the same frames, in the same run; ratio = the quotient.
-- Haskell twin of nofib_like/killblocked.cpp.
module Main (main) where

import Control.Concurrent
import Control.Exception
import Control.Monad
import Data.IORef
import GHC.Clock (getMonotonicTimeNSec)
import GHC.Conc (ThreadStatus (..), threadStatus)
import System.Environment (getArgs)
import System.Exit
import Text.Printf (printf)

descend :: IORef Int -> Int -> IO () -> IO ()
descend c k bottom
  | k <= 1 = bottom `finally` bump c
  | otherwise = descend c (k - 1) bottom `finally` bump c

bump :: IORef Int -> IO ()
bump c = atomicModifyIORef' c (\x -> (x + 1, ()))

waitFor :: IORef Int -> Int -> IO ()
waitFor r want = do
  v <- readIORef r
  when (v < want) (yield >> waitFor r want)

waitBlocked :: ThreadId -> IO ()
waitBlocked t = do
  s <- threadStatus t
  case s of
    ThreadBlocked _ -> return ()
    _ -> yield >> waitBlocked t

floorNs :: Int -> Int -> IO Double
floorNs frames reps = do
  c <- newIORef 0
  t0 <- getMonotonicTimeNSec
  forM_ [1 .. reps] $ \_ ->
    descend c frames (throwIO ThreadKilled) `catch` \e -> case e of
      ThreadKilled -> return ()
      _ -> throwIO e
  t1 <- getMonotonicTimeNSec
  return (fromIntegral (t1 - t0) / fromIntegral reps)

body :: Int -> Int -> IO (Double, Double, Bool)
body n frames = do
  c <- newIORef 0
  tids <- forM [1 .. n] $ \_ -> do
    m <- newEmptyMVar :: IO (MVar ())
    forkIO (descend c frames (takeMVar m))
  mapM_ waitBlocked tids
  t0 <- getMonotonicTimeNSec
  mapM_ killThread tids
  waitFor c (n * frames)
  t1 <- getMonotonicTimeNSec
  fl <- floorNs frames n
  v <- readIORef c
  return (fromIntegral (t1 - t0) / fromIntegral n, fl, v == n * frames)

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
